package report

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// anchors are a Markdown file's headings' fragments; a repeated one gets
// -1, -2, ... as on the forge.
func anchors(text string) map[string]bool {
	out, seen := map[string]bool{}, map[string]int{}
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		a := anchor(strings.TrimSpace(strings.TrimLeft(line, "#")))
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestAnchor(t *testing.T) {
	for h, want := range map[string]string{
		GoalTitle: "defended-runs-that-learn",
		"Faults: kill -9 and SIGTERM of the aggregator and a party, resumed from checkpoints": "faults-kill--9-and-sigterm-of-the-aggregator-and-a-party-resumed-from-checkpoints",
		"Throughput (`throughput.csv`)": "throughput-throughputcsv",
	} {
		if got := anchor(h); got != want {
			t.Errorf("anchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// Every link of README.md and docs/*.md into a committed report names one
// of its headings: renaming a section breaks no link silently (README.md's
// REPORT.md#defended-runs-that-learn is the goal section's).
func TestReportLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`results/(REPORT[\w-]*\.md)#([^)\s]+)`)
	cache := map[string]map[string]bool{}
	checked := 0
	for _, doc := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			file, frag := m[1], m[2]
			if cache[file] == nil {
				rep, err := os.ReadFile(filepath.Join(results, file))
				if err != nil {
					t.Errorf("%s links to results/%s: %v", doc, file, err)
					continue
				}
				cache[file] = anchors(string(rep))
			}
			checked++
			if !cache[file][frag] {
				t.Errorf("%s links to results/%s#%s: no heading of the report has that anchor", doc, file, frag)
			}
		}
	}
	if checked == 0 {
		t.Error("no link into results/REPORT*.md found: the pattern no longer matches the docs")
	}
}
