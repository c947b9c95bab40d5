package openapi

import (
	"encoding/json"
	"testing"

	"flotilla.dev/flotilla/api"
)

// BenchmarkNew measures building every document at hub start and reports
// the size of the v2 JSON document.
func BenchmarkNew(b *testing.B) {
	var s *Server
	for b.Loop() {
		var err error
		if s, err = New(api.Resources()); err != nil {
			b.Fatal(err)
		}
	}
	j, err := json.Marshal(s.V2())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(j)), "v2-bytes")
}
