package run

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is plain data: no field of it, however deep, is a function, a
// channel, an interface or an unsafe pointer (those are Hooks; a logger,
// which holds its writer, is Hooks.Log), and no struct of this package in
// it has an unexported field (the working state of a run in progress is
// job's). This test fails when a hook, a logger or working state is added
// back.
func TestConfigIsPlainData(t *testing.T) {
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		switch typ.Kind() {
		case reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer:
			t.Errorf("%s is a %s: a hook belongs in Hooks, not Config", path, typ.Kind())
			return
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(typ.Elem(), path+"[]")
			return
		case reflect.Map:
			walk(typ.Key(), path+"{key}")
			walk(typ.Elem(), path+"{}")
			return
		case reflect.Struct:
		default:
			return
		}
		if seen[typ] {
			return
		}
		seen[typ] = true
		for f := range typ.Fields() {
			p := path + "." + f.Name
			if !f.IsExported() && typ.PkgPath() == reflect.TypeFor[Config]().PkgPath() {
				t.Errorf("%s is unexported: no run file or JSON carries it (a run's working state belongs in job)", p)
				continue
			}
			walk(f.Type, p)
		}
	}
	walk(reflect.TypeFor[Config](), "Config")
}

// Config round-trips through the forms a run's settings are written in
// (YAML, the run file's language, and JSON): every exported field, set to
// a value that is not its zero, comes back equal.
func TestConfigRoundTrips(t *testing.T) {
	want := Defaults()
	fill(reflect.ValueOf(&want).Elem(), 1)
	// dataset.CSVOptions.Report is where the CSV reader reports, not a
	// setting: a run ignores it in Config (Hooks.Missing).
	want.CSV.Report = nil
	for name, codec := range map[string]struct {
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		"yaml": {yaml.Marshal, yaml.Unmarshal},
		"json": {json.Marshal, json.Unmarshal},
	} {
		b, err := codec.marshal(&want)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got Config
		if err := codec.unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the decoded Config differs\n got %+v\nwant %+v", name, got, want)
		}
	}
}

// fill sets every settable exported field of v, however deep, to a value
// that is not its zero, from seed.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(seed) * int64(time.Millisecond))
			return
		}
		v.SetInt(int64(seed%100 + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed%100 + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) + 0.5)
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", seed%7))
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), seed+1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), seed+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, seed+1)
		fill(e, seed+2)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed+i+1)
			}
		}
	}
}
