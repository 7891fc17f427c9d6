package broker

import (
	"testing"
)

func TestParsePubAck(t *testing.T) {
	for _, tc := range []struct {
		in        string
		dup       bool
		batch     string
		count     uint64
		errCode   int
		wantError bool
	}{
		{in: `{"stream":"S","seq":12}`},
		{in: `{"stream":"S","domain":"D","seq":12}`},
		{in: `{"stream":"S","seq":12,"duplicate": true}`, dup: true},
		{in: `{"stream":"S","seq":7,"batch":"b-1","count":5}`, batch: "b-1", count: 5},
		{in: `{"stream":"S","seq":7,"duplicate": true,"batch":"b-1","count":1}`, dup: true, batch: "b-1", count: 1},
		{in: `{"error":{"code":503,"err_code":10077,"description":"x"},"stream":"S"}`, errCode: 10077},
		{in: `{"stream":"S","error":{"code":400,"err_code":10208,"description":"batch publish ID unknown"}}`, errCode: 10208},
		{in: `{"stream":"S"}`, wantError: true},
		{in: `nonsense`, wantError: true},
		{in: ``, wantError: true},
	} {
		a, err := parsePubAck([]byte(tc.in))
		if (err != nil) != tc.wantError {
			t.Errorf("%s: error %v", tc.in, err)
			continue
		}
		if err != nil {
			continue
		}
		code := 0
		if a.Error != nil {
			code = int(a.Error.ErrorCode)
		}
		if a.Duplicate != tc.dup || a.Batch != tc.batch || a.Count != tc.count || code != tc.errCode {
			t.Errorf("%s: got %+v (code %d)", tc.in, a, code)
		}
	}
}

func TestJSONUint(t *testing.T) {
	for _, tc := range []struct {
		in, key string
		v       uint64
		ok      bool
	}{
		{`{"type":"ack","seq":42,"msgs":5}`, `"seq":`, 42, true},
		{`{"type":"ack","seq":42,"msgs":5}`, `"msgs":`, 5, true},
		{`{"seq": 7}`, `"seq":`, 7, true},
		{`{"seq":"x"}`, `"seq":`, 0, false},
		{`{}`, `"seq":`, 0, false},
	} {
		v, ok := jsonUint([]byte(tc.in), tc.key)
		if v != tc.v || ok != tc.ok {
			t.Errorf("%s %s: %d %v", tc.in, tc.key, v, ok)
		}
	}
}

// Sending and settling a message allocates nothing once the publisher is
// warm (the reply subject and nats.go's header encoding aside).
func BenchmarkPubAckParse(b *testing.B) {
	d := []byte(`{"stream":"ASYREVEL_run","seq":123456}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parsePubAck(d); err != nil {
			b.Fatal(err)
		}
	}
}
