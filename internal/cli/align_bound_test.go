package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// align --max-ratio: a party's file of more than 4 times the label
// holder's rows is refused with the bound and the fix; --max-ratio 0
// lifts the bound, a larger ratio admits it, a negative one is a usage
// error.
func TestAlignMaxRatio(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	labels := w("l.csv", "id,y\na,1\nb,0\nc,1\n")
	var b strings.Builder
	b.WriteString("id,x\n")
	for i := range 13 {
		fmt.Fprintf(&b, "%c,%d\n", 'a'+i, i)
	}
	big := w("big.csv", b.String())
	align := func(extra ...string) (int, string, string) {
		return runCLI(t, append([]string{"align", "--inputs", labels + "," + big, "--key", "id", "--label", "y", "--out", filepath.Join(dir, "o"), "--progress", "0"}, extra...)...)
	}
	code, _, e := align()
	if code == 0 || !strings.Contains(e, "party-1 states a set of 13 keys, more than 4 times the hub's 3 (at most 12)") || !strings.Contains(e, "--max-ratio") {
		t.Errorf("13 rows against 3: exit %d, %q", code, e)
	}
	for _, ratio := range []string{"0", "5"} {
		if code, o, e := align("--max-ratio", ratio); code != 0 || !strings.Contains(o, "3 in common") {
			t.Errorf("--max-ratio %s: exit %d, %s %s", ratio, code, o, e)
		}
	}
	if code, _, e := align("--max-ratio", "-1"); code == 0 || !strings.Contains(e, "--max-ratio -1") {
		t.Errorf("--max-ratio -1: exit %d, %q", code, e)
	}
}
