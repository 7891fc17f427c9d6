// Package privacy measures what a run's traffic reveals: label and feature
// inference attacks on a run's recorded log (package replay), each reading
// only what its attacker legitimately sees (a View), and scorers that
// alone read the ground truth.
//
// Attacks on labels, by a curious party (or several colluding):
//   - sign: the logistic loss is monotone, so sign(h_bar - h) sign(c_hat -
//     c) = -y for any mu; summed over the visits of each sample.
//   - loss: inverting the logistic loss h gives the margin t = y z; with
//     h_bar, (t_bar - t)/(c_hat - c) = y exactly, and y t - c_m is the sum
//     of the other parties' outputs (plus the intercept).
//   - regression: against replies that carry only a batch mean, the party
//     regresses the means on what it knows per sample (its own c_hat - c):
//     mean(h_bar - h) is nearly linear in the per-sample terms, whose
//     signs are the labels (least squares by CGLS). The same attack reads
//     an active attacker's crafted batches (only one sample perturbed per
//     request), which make the system exactly determined.
//   - derivative (multiclass heads): the per-sample directional derivative
//     of the loss, clustered into classes with a few known labels.
//   - nudge (multiclass heads, the active attacker's): the derivative
//     attack in windows of the run, on the requests of a party that nudges
//     every sample of a batch by +-P with Hadamard signs and repeats the
//     batch (Active with Nudge), so that every reply carries every label.
//
// Attacks by a curious aggregator: feature inference from the outputs it
// receives, with auxiliary samples whose features it knows (ridge
// regression from each sample's outputs over the evaluation rounds).
//
// Malicious parties are adversaries that run inside a training (package
// party's Adversary): the active attacker (single-sample perturbation,
// batches of one, pairs, or every sample nudged), inflated outputs, and a
// backdoor.
//
// Every attack writes attack.json (accuracy or R squared, ROC AUC, samples
// covered) and a plot.
package privacy
