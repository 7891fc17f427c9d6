package board

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/asyrevel/asyrevel/internal/atomicfile"
	"github.com/asyrevel/asyrevel/observe"
)

//go:embed assets/board.html
var page []byte

// The report's data goes between these marks of the page's script.
var (
	dataStart = []byte("/*DATA*/")
	dataEnd   = []byte("/*END*/")
)

// Handler serves the board of w: the page at /, its state at /api/state
// (?since=N: the curve from point N on).
func Handler(w *observe.Watch) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && r.URL.Path != "/index.html" {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		rw.Header().Set("Cache-Control", "no-cache")
		rw.Write(page)
	})
	mux.HandleFunc("/api/state", func(rw http.ResponseWriter, r *http.Request) {
		since, _ := strconv.Atoi(r.URL.Query().Get("since"))
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(rw).Encode(w.State(since))
	})
	return mux
}

// Page is the board's page with st inlined: a report that needs no
// server.
func Page(st observe.State) ([]byte, error) {
	data, err := json.Marshal(st) // escapes <, > and &: no "</script>" inside
	if err != nil {
		return nil, fmt.Errorf("board: %w", err)
	}
	i, j := bytes.Index(page, dataStart), bytes.Index(page, dataEnd)
	if i < 0 || j < i {
		panic("board: the page lacks its data marks")
	}
	var b bytes.Buffer
	b.Write(page[:i])
	b.Write(data)
	b.Write(page[j+len(dataEnd):])
	return b.Bytes(), nil
}

// WriteReport writes the board's page with st inlined to path, through
// a temporary file renamed into place (atomicfile.Write).
func WriteReport(path string, st observe.State) error {
	b, err := Page(st)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteBytes(path, 0o644, b); err != nil {
		return fmt.Errorf("board: writing %s: %w", path, err)
	}
	return nil
}
