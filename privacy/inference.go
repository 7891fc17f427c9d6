package privacy

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// WriteInference writes an inference's per-sample output to
// dir/inference.csv: sample_id, predicted class, score(s).
func WriteInference(dir string, inf *LabelInference) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "inference.csv"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprint(w, "sample_id,predicted")
	per := 1
	if inf.Classes > 2 {
		per = inf.Classes
		for c := range per {
			fmt.Fprintf(w, ",score_%d", c)
		}
	} else {
		fmt.Fprint(w, ",score")
	}
	if inf.Others != nil {
		fmt.Fprint(w, ",others_sum")
	}
	fmt.Fprintln(w)
	var b []byte
	for j, id := range inf.IDs {
		b = strconv.AppendUint(b[:0], uint64(id), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(inf.Pred[j]), 10)
		for _, s := range inf.Score[j*per : (j+1)*per] {
			b = append(b, ',')
			b = strconv.AppendFloat(b, s, 'g', 8, 64)
		}
		if inf.Others != nil {
			b = append(b, ',')
			b = strconv.AppendFloat(b, inf.Others[j], 'g', 8, 64)
		}
		b = append(b, '\n')
		w.Write(b)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
