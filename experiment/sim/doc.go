// Package sim holds what the experiments compare the pipeline with: the
// virtual-time simulator of AsyREVEL and SynREVEL on q machines (Simulate:
// the step kernel's real computation, ordered by a cost model's clock), the
// single-process reference loop (ReferenceZO, ReferenceFor), first-order
// training of the same split network (FirstOrder, FirstOrderFor) and the
// centralised logistic regression (CentralLogistic: L-BFGS, f* and the
// reference accuracy). None of them sends a message; each computes the
// steps with the code the runtimes run (package zoo/kernel).
package sim
