package e2e

import (
	"net/http"
	"slices"
	"testing"
	"time"
)

// Every worker process announces its services' handlers when it starts:
// operators see them, with live instances, through WorkerService.
func TestWorkersAnnounceTheirHandlersAtStart(t *testing.T) {
	t.Parallel()
	s := startSuite(t, suiteOptions{})
	want := map[string]string{"ocr": "OCR", "embedding": "EMBEDDING", "sis": "SIS", "raster": "raster_validate", "tiles": "tiles_plan"}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := s.rest("GET", "/v1/workers", nil)
		if code != http.StatusOK {
			t.Fatalf("list workers: %d %v", code, body)
		}
		missing := map[string]string{}
		for svc, h := range want {
			missing[svc] = h
		}
		workers, _ := body["workers"].([]any)
		for _, w := range workers {
			w := w.(map[string]any)
			svc, _ := w["service"].(string)
			var names []string
			for _, h := range w["handlers"].([]any) {
				names = append(names, h.(map[string]any)["name"].(string))
			}
			instances, _ := w["instances"].([]any)
			if slices.Contains(names, want[svc]) && len(instances) == 1 && instances[0].(map[string]any)["live"] == true {
				delete(missing, svc)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("services not announced with a live instance: %v (workers: %v)", missing, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
