package board_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/asyrevel/asyrevel/board"
	"github.com/asyrevel/asyrevel/observe"
)

// A report inlines its state in the page's script: text from the run (an
// event, a run id) cannot end the script early, and the state reads back.
func TestPageInlinesStateSafely(t *testing.T) {
	evil := `</script><script>alert(1)</script><!--`
	st := observe.State{Info: observe.Info{Run: "r1", Parties: 2}, Phase: "done", Final: true,
		Curve:  []observe.CurvePoint{{Seconds: 1, Steps: 10, TrainLoss: 0.5, TestLoss: 0.6, Accuracy: 0.9}},
		Events: []observe.Event{{Kind: "rejected", Text: evil}}}
	page, err := board.Page(st)
	if err != nil {
		t.Fatal(err)
	}
	html := string(page)
	if strings.Contains(html, evil) || strings.Count(html, "</script>") != 1 {
		t.Fatalf("the inlined state can end the script: %d </script> tags", strings.Count(html, "</script>"))
	}
	const mark = "const REPORT = "
	i := strings.Index(html, mark)
	if i < 0 {
		t.Fatal("no inlined state")
	}
	var back observe.State
	if err := json.NewDecoder(strings.NewReader(html[i+len(mark):])).Decode(&back); err != nil {
		t.Fatal(err)
	}
	if back.Events[0].Text != evil || back.Run != "r1" || len(back.Curve) != 1 {
		t.Fatalf("state read back: %+v", back)
	}
}

// NaN (no test set) travels as null, which the page draws as a gap.
func TestNaNIsNull(t *testing.T) {
	b, err := json.Marshal(observe.CurvePoint{TrainLoss: 0.5, Accuracy: observe.Num(nan())})
	if err != nil || !strings.Contains(string(b), `"accuracy":null`) {
		t.Fatalf("%s %v", b, err)
	}
}

func nan() float64 { var z float64; return z / z }
