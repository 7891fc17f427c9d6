// Package kernel is the one place where AsyREVEL's step is computed: the
// party's zeroth-order probe and update, the aggregator's reply (h and
// h_bar per sample from the table row and the party's fresh c and c_hat)
// and the head's own zeroth-order step.
//
// The runtimes (packages party and aggregator), the virtual-time simulator
// (experiment.Simulate) and the single-process reference loop
// (experiment.ReferenceZO) all call these functions; none of them carries
// its own copy of the arithmetic. What differs between them is only when
// each step happens and what travels between the calls (messages, or
// nothing). experiment's TestKernelSimulatorMatchesRuntime checks that, for
// the same order of arrivals at the aggregator, the simulator and the real
// runtimes over the in-memory bus end with the same parameters bit for bit.
//
// One asynchronous step of party m on a batch B (DESIGN.md, "One
// asynchronous step"):
//
//	party:      Probe      u ~ dist, w' = w + mu u, c = F_m(w; x_B), c_hat = F_m(w'; x_B)
//	            RegDiff    r = lambda (g(w') - g(w))
//	aggregator: Reply      per sample: C[i][m] = c_i; h_i = F_0(w_0, C[i]); h_bar_i with c_hat_i in slot m
//	            HeadProbe  u_0 ~ dist, w_0' = w_0 + mu u_0
//	            HeadDiffs  h_hat_i - h_i = F_0(w_0', C[i]) - h_i
//	            Update     w_0 <- w_0 - eta_0 (phi_0/mu) mean_i(h_hat_i - h_i) u_0
//	party:      MeanDiff   mean_i(h_bar_i - h_i)
//	            Update     w <- w - eta (phi/mu) (mean_i(h_bar_i - h_i) + r) u
//
// The functions are pure apart from writing into the slices they are given
// and drawing from the generator they are given: they keep no state, do not
// allocate, and panic on programmer errors (mismatched lengths), as package
// zoo does.
package kernel
