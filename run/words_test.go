package run

import (
	"strings"
	"testing"
)

// A majority warning never states an accuracy and a different class share
// as the same thing.
func TestMajorityWarningWords(t *testing.T) {
	cfg := &job{Config: Defaults()}
	cfg.LR, cfg.Mu = 0.1, 0.001
	p := &progress{cfg: cfg, majority: 0.3889}
	w := p.majorityWarning(0.3333, "at the end")
	if strings.Contains(w, "is the share of the largest class") {
		t.Errorf("33.33%% called the share of a 38.89%% class: %s", w)
	}
	if !strings.Contains(w, "no better than always predicting the largest class (38.89%") {
		t.Errorf("warning: %s", w)
	}
	if w := p.majorityWarning(0.3889, "at the end"); !strings.Contains(w, "is the share of the largest class") {
		t.Errorf("at the share: %s", w)
	}
}

// A reused run id says how to go on with it, not that resuming is missing.
func TestReusedRunWords(t *testing.T) {
	n := &network{store: "/s"}
	err := n.reused("r1", 5, "messages")
	if strings.Contains(err.Error(), "not supported") || !strings.Contains(err.Error(), "--resume") {
		t.Errorf("reused: %v", err)
	}
}
