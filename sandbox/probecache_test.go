package sandbox

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// decodeCacheStrict is the decode parseCacheFile replaced: strict encoding/json.
func decodeCacheStrict(b []byte, key string) (cacheFile, bool) {
	var f cacheFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if dec.Decode(&f) != nil || f.Version != 1 || f.Key != key {
		return cacheFile{}, false
	}
	return f, true
}

var cacheFileSamples = []cacheFile{
	{Version: 1, Key: "k", Backend: BackendBwrap, Probes: []cacheProbe{{Backend: BackendBwrap}}},
	{Version: 1, Key: "kernel=6.1 #1 SMP;euid=0;/usr/bin/bwrap=1:2:3:4.5:6.7;", Backend: BackendLandlock,
		Probes: []cacheProbe{{Backend: BackendBwrap, Error: "bwrap: setting up uid map: Permission denied"}, {Backend: BackendLandlock}}},
	{Version: 1, Key: "k", Probes: []cacheProbe{{Backend: BackendBwrap, Error: "a\nb \"q\" <&> \\ \t\x01 é \u2028"},
		{Backend: BackendLandlock, Error: "x"}}},
	{Version: 1, Key: "/home/a&b/<x>/\"y\"\\z=missing;"},
	{Version: 1, Key: "k", Backend: BackendBwrap, Probes: []cacheProbe{}},
	{Version: 1, Key: "invalid \xff utf-8", Backend: BackendBwrap},
}

func TestParseCacheFileReadsWhatStoreWrites(t *testing.T) {
	for _, want := range cacheFileSamples {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		strict, ok := decodeCacheStrict(b, string(bytes.ToValidUTF8([]byte(want.Key), []byte("\ufffd"))))
		if !ok {
			t.Fatalf("strict decode of %s failed", b)
		}
		got, ok := parseCacheFile(b, strict.Key)
		if !ok || !reflect.DeepEqual(got, strict) {
			t.Fatalf("parseCacheFile(%s) = %+v, %v; encoding/json: %+v", b, got, ok, strict)
		}
		// Negative controls: another key, a cut or extended file, another version.
		if _, ok := parseCacheFile(b, strict.Key+"x"); ok {
			t.Fatalf("%s accepted for another key", b)
		}
		for _, bad := range [][]byte{b[:len(b)-1], append(bytes.Clone(b), ' '), append(bytes.Clone(b), '}'),
			bytes.Replace(b, []byte(`"version":1`), []byte(`"version":2`), 1),
			bytes.Replace(b, []byte(`"probes"`), []byte(`"probez"`), 1)} {
			if _, ok := parseCacheFile(bad, strict.Key); ok {
				t.Fatalf("damaged %q accepted", bad)
			}
		}
	}
}

// FuzzParseCacheFile: the hand parser never accepts what strict encoding/json
// rejects, and when it accepts, both read the same verdict.
func FuzzParseCacheFile(f *testing.F) {
	for _, s := range cacheFileSamples {
		b, _ := json.Marshal(s)
		f.Add(b, s.Key)
	}
	f.Add([]byte(`{"version":1,"key":"k","backend":"bwrap","probes":[{"backend":"bwrap","error":"\ud800"}]}`), "k")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		got, ok := parseCacheFile(b, key)
		if !ok {
			return
		}
		want, wok := decodeCacheStrict(b, key)
		if !wok {
			t.Fatalf("parseCacheFile accepted %q, which encoding/json rejects", b)
		}
		if len(want.Probes) == 0 && len(got.Probes) == 0 {
			want.Probes, got.Probes = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: parseCacheFile %+v, encoding/json %+v", b, got, want)
		}
	})
}
