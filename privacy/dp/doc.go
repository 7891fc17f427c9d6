// Package dp is the privacy accountant of the aggregator's label defenses:
// zero-concentrated DP (zCDP) composition of Gaussian mechanisms, its
// conversion to (epsilon, delta), randomised response, and the largest ROC
// AUC an attacker can reach against a label protected this way.
//
// Every label is accounted on its own: each reply that involves sample i
// is a Gaussian mechanism on y_i with L2 sensitivity Delta and noise sigma,
// that is rho = Delta^2 / (2 sigma^2) zCDP; rho adds up over all the visits
// of i (Bun and Steinke 2016, Lemma 2.3), with no amplification by
// subsampling, since the party, not chance, chooses which samples it asks
// about. A composition of Gaussian mechanisms is itself exactly a Gaussian
// mechanism with mu = sqrt(2 rho) (mu-GDP; Dong, Roth and Su 2019), whose
// (epsilon, delta) curve has a closed form (Balle and Wang 2018): Epsilon
// uses it, and is tighter than the generic zCDP conversions, also given.
package dp
