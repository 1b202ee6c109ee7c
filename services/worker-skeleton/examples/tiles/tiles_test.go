package tiles_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/workertest"
	"github.com/lucius-platform/lucius/services/worker-skeleton/examples/tiles"
)

// directive is a tiles directive of handler whose job input holds input.
func directive(t *testing.T, handler string, input []byte, payload map[string]any) *luciusv1.Directive {
	t.Helper()
	d := workertest.Directive(t, handler, input, payload)
	d.Service = "tiles"
	return d
}

// next is the directive of a later step of the same job: same workspace and
// job input, the handler's own step_id and payload, input_ref the upstream's
// primary artifact.
func next(t *testing.T, d *luciusv1.Directive, handler, stepID, inputRef string, payload map[string]any) *luciusv1.Directive {
	t.Helper()
	n := proto.Clone(d).(*luciusv1.Directive)
	n.StepType, n.StepId, n.InputRef = handler, stepID, inputRef
	p, err := structpb.NewStruct(payload)
	if err != nil {
		t.Fatal(err)
	}
	n.Payload = p
	return n
}

// asJSON is an output as the orchestrator stores and renders it: the
// RESULT's Struct, JSON numbers as float64.
func asJSON(t *testing.T, out map[string]any) map[string]any {
	t.Helper()
	s, err := structpb.NewStruct(out)
	if err != nil {
		t.Fatalf("output is not JSON-like: %v", err)
	}
	return s.AsMap()
}

func wantPermanent(t *testing.T, err error, reasonPart string) {
	t.Helper()
	_, reason := worker.Classify(err)
	if !worker.IsPermanent(err) || !strings.Contains(reason, reasonPart) {
		t.Fatalf("err = %v (reason %q), want a permanent failure with %q", err, reason, reasonPart)
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		size    int64
		n       int
		lengths []int64
	}{
		{10, 3, []int64{4, 3, 3}},
		{12, 4, []int64{3, 3, 3, 3}},
		{2, 5, []int64{1, 1, 0, 0, 0}},
		{0, 2, []int64{0, 0}},
		{7, 1, []int64{7}},
		{1 << 40, 3, []int64{366503875926, 366503875925, 366503875925}},
	} {
		t.Run(fmt.Sprintf("%d/%d", tc.size, tc.n), func(t *testing.T) {
			t.Parallel()
			got := tiles.Split(tc.size, tc.n)
			if len(got) != tc.n {
				t.Fatalf("Split = %d tiles, want %d", len(got), tc.n)
			}
			var off int64
			for i, tile := range got {
				if tile.Index != i || tile.Offset != off || tile.Length != tc.lengths[i] {
					t.Errorf("tile %d = %+v, want offset %d length %d", i, tile, off, tc.lengths[i])
				}
				off += tile.Length
			}
			if off != tc.size {
				t.Errorf("tiles cover %d bytes, want %d", off, tc.size)
			}
		})
	}
	if got := tiles.Split(10, 0); got != nil {
		t.Errorf("Split(10, 0) = %v", got)
	}
}

func TestPlanTiles(t *testing.T) {
	t.Parallel()
	small := []byte("0123456789")
	for _, tc := range []struct {
		name    string
		input   []byte
		tiles   any
		wantErr string
	}{
		{"four tiles", small, 4.0, ""},
		{"more tiles than bytes", small[:3], 5.0, ""},
		{"one tile of an empty input", []byte{}, 1.0, ""},
		{"1000 tiles of a small file", bytes.Repeat([]byte("tile data "), 5000), 1000.0, ""},
		{"the maximum", small, float64(tiles.MaxTiles), ""},
		{"missing tiles", small, nil, "INVALID_INPUT: tiles_plan: payload.tiles is required"},
		{"zero tiles", small, 0.0, "INVALID_INPUT: tiles_plan: payload.tiles: want an integer in [1, 10000]"},
		{"too many tiles", small, 10001.0, "payload.tiles: want an integer in [1, 10000]"},
		{"fractional tiles", small, 2.5, "payload.tiles: want an integer"},
		{"tiles as a string", small, "16", "payload.tiles: want an integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			payload := map[string]any{}
			if tc.tiles != nil {
				payload["tiles"] = tc.tiles
			}
			d := directive(t, tiles.HandlerPlan, tc.input, payload)
			out, task, err := workertest.Execute(t, tiles.NewExecutor(), d)
			if tc.wantErr != "" {
				wantPermanent(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			n := int(tc.tiles.(float64))
			want := tiles.Plan{Tiles: tiles.Split(int64(len(tc.input)), n), InputBytes: int64(len(tc.input))}
			wantJSON, _ := json.Marshal(want)
			gotJSON, err := json.Marshal(asJSON(t, out.Output))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gotJSON, wantJSON) && !equalDecoded(t, gotJSON, wantJSON) {
				t.Errorf("output = %.200s, want %.200s", gotJSON, wantJSON)
			}
			if n == 1000 && len(gotJSON) >= 64<<10 {
				t.Errorf("a plan of 1000 tiles is %d bytes of JSON; want under 64 KiB", len(gotJSON))
			}
			arts := task.Artifacts()
			if len(arts) != 1 || arts[0].GetName() != tiles.PlanArtifact || !strings.HasSuffix(arts[0].GetUri(), "/tiles_plan/1/plan.json") {
				t.Fatalf("artifacts = %v", arts)
			}
			var file tiles.Plan
			if err := json.Unmarshal(workertest.ReadArtifact(t, arts[0]), &file); err != nil || len(file.Tiles) != n ||
				file.InputBytes != want.InputBytes || file.Tiles[n-1] != want.Tiles[n-1] {
				t.Errorf("plan.json = %d tiles, %d bytes (%v)", len(file.Tiles), file.InputBytes, err)
			}
		})
	}
}

func TestPlanTilesOnlyStatsTheInput(t *testing.T) {
	t.Parallel()
	d := directive(t, tiles.HandlerPlan, nil, map[string]any{"tiles": 16.0})
	big := filepath.Join(t.TempDir(), "big.bin")
	os.WriteFile(big, nil, 0o644)
	if err := os.Truncate(big, 8<<30); err != nil { // 8 GiB, sparse
		t.Fatal(err)
	}
	d.JobInputRef = "file://" + big
	started := time.Now()
	out, _, err := workertest.Execute(t, tiles.NewExecutor(), d)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(started); elapsed > 2*time.Second {
		t.Errorf("planning took %v", elapsed)
	}
	got := asJSON(t, out.Output)
	last := got["tiles"].([]any)[15].(map[string]any)
	if got["input_bytes"] != float64(8<<30) || last["offset"] != float64(15<<29) || last["length"] != float64(1<<29) {
		t.Errorf("plan = input_bytes %v, last tile %v", got["input_bytes"], last)
	}
}

func TestPlanTilesInputErrors(t *testing.T) {
	t.Parallel()
	d := directive(t, tiles.HandlerPlan, nil, map[string]any{"tiles": 2.0})
	d.JobInputRef += ".missing"
	_, _, err := workertest.Execute(t, tiles.NewExecutor(), d)
	wantPermanent(t, err, "INPUT_NOT_FOUND: tiles_plan: job input: read file://")

	d = directive(t, tiles.HandlerPlan, nil, map[string]any{"tiles": 2.0})
	d.JobInputRef = ""
	_, _, err = workertest.Execute(t, tiles.NewExecutor(), d)
	wantPermanent(t, err, "tiles_plan: the directive has no job_input_ref")
}

func TestProcessTile(t *testing.T) {
	t.Parallel()
	input := []byte("abcdefghijklmnopqrstuvwxyz")
	tile := func(i, off, n float64) map[string]any { return map[string]any{"index": i, "offset": off, "length": n} }
	for _, tc := range []struct {
		name    string
		payload map[string]any
		want    string // the tile's bytes
		wantErr string
	}{
		{"middle tile", map[string]any{"tile": tile(2, 10, 5), "index": 2.0, "fail_tile": -1.0}, "klmno", ""},
		{"last byte", map[string]any{"tile": tile(9, 25, 1), "index": 9.0}, "z", ""},
		{"empty tile", map[string]any{"tile": tile(7, 26, 0), "index": 7.0, "fail_tile": 3.0}, "", ""},
		{"marked to fail", map[string]any{"tile": tile(3, 0, 4), "index": 3.0, "fail_tile": 3.0}, "",
			"PERMANENT: tile 3 is marked to fail (fail_tile)"},
		{"marked to fail, first tile", map[string]any{"tile": tile(0, 0, 4), "index": 0.0, "fail_tile": 0.0}, "",
			"PERMANENT: tile 0 is marked to fail (fail_tile)"},
		{"range past the end", map[string]any{"tile": tile(1, 20, 7), "index": 1.0}, "",
			"INVALID_INPUT: tile_process: tile 1 range [20, 27) lies outside the job input's 26 bytes"},
		{"index mismatch", map[string]any{"tile": tile(1, 0, 4), "index": 2.0}, "",
			"tile_process: payload.tile.index 1 does not match payload.index 2"},
		{"missing index", map[string]any{"tile": tile(1, 0, 4)}, "", "tile_process: payload.index is required"},
		{"missing tile", map[string]any{"index": 1.0}, "", "tile_process: payload.tile: want an object {index, offset, length}, have nothing"},
		{"tile not an object", map[string]any{"tile": "0-4", "index": 1.0}, "", `payload.tile: want an object {index, offset, length}, have "0-4"`},
		{"negative offset", map[string]any{"tile": tile(1, -1, 4), "index": 1.0}, "", "payload.tile: offset: want an integer in [0, "},
		{"fractional length", map[string]any{"tile": tile(1, 0, 1.5), "index": 1.0}, "", "payload.tile: length: want an integer"},
		{"bad fail_tile", map[string]any{"tile": tile(1, 0, 4), "index": 1.0, "fail_tile": "one"}, "", "payload.fail_tile: want an integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := directive(t, tiles.HandlerProcess, input, tc.payload)
			d.StepId = "split[0]"
			d.InputRef = "file:///plan/is/not/read/plan.json"
			out, task, err := workertest.Execute(t, tiles.NewExecutor(), d)
			if tc.wantErr != "" {
				wantPermanent(t, err, tc.wantErr)
				if len(task.Artifacts()) != 0 {
					t.Errorf("artifacts written for a failed tile: %v", task.Artifacts())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tl := tc.payload["tile"].(map[string]any)
			want := map[string]any{"index": tl["index"], "sha256": hexSum([]byte(tc.want)), "bytes": float64(len(tc.want))}
			if got := asJSON(t, out.Output); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("output = %v, want %v", got, want)
			}
			arts := task.Artifacts()
			wantFile := fmt.Sprintf("/tile_process/1/tile-%d.json", int(tl["index"].(float64)))
			if len(arts) != 1 || arts[0].GetName() != tiles.TileArtifact || !strings.HasSuffix(arts[0].GetUri(), wantFile) {
				t.Fatalf("artifacts = %v, want one at ...%s", arts, wantFile)
			}
			var file tiles.TileResult
			if err := json.Unmarshal(workertest.ReadArtifact(t, arts[0]), &file); err != nil ||
				file != (tiles.TileResult{Index: int(tl["index"].(float64)), Offset: int64(tl["offset"].(float64)),
					Length: int64(len(tc.want)), SHA256: hexSum([]byte(tc.want))}) {
				t.Errorf("tile file = %+v (%v)", file, err)
			}
		})
	}
}

func TestAggregate(t *testing.T) {
	t.Parallel()
	sums := []string{hexSum([]byte("a")), hexSum([]byte("bc")), hexSum(nil)}
	result := func(i int, sum string, n float64) map[string]any {
		return map[string]any{"index": float64(i), "sha256": sum, "bytes": n}
	}
	ordered := []any{result(0, sums[0], 1), result(1, sums[1], 2), result(2, sums[2], 0)}
	for _, tc := range []struct {
		name    string
		payload map[string]any
		wantErr string
	}{
		{"three tiles in order", map[string]any{"results": ordered}, ""},
		{"one tile", map[string]any{"results": []any{result(0, sums[0], 1)}}, ""},
		{"out of order", map[string]any{"results": []any{ordered[1], ordered[0], ordered[2]}},
			"INVALID_INPUT: tiles_aggregate: payload.results[0] is tile 1; want the tiles 0..2 in order"},
		{"a tile missing", map[string]any{"results": []any{ordered[0], ordered[2]}},
			"payload.results[1] is tile 2; want the tiles 0..1 in order"},
		{"a duplicate tile", map[string]any{"results": []any{ordered[0], ordered[0]}}, "payload.results[1] is tile 0"},
		{"bad sha256", map[string]any{"results": []any{result(0, "XYZ", 1)}}, `payload.results[0]: sha256 "XYZ": want 64 lowercase hex digits`},
		{"uppercase sha256", map[string]any{"results": []any{result(0, strings.ToUpper(sums[0]), 1)}}, "want 64 lowercase hex digits"},
		{"a null result", map[string]any{"results": []any{ordered[0], nil}}, "payload.results[1]: want a tile output {index, sha256, bytes}, have nothing"},
		{"negative bytes", map[string]any{"results": []any{result(0, sums[0], -1)}}, "payload.results[0]: bytes: want an integer"},
		{"empty results", map[string]any{"results": []any{}}, "payload.results: want a non-empty list of tile outputs, have []"},
		{"results not a list", map[string]any{"results": "all"}, `payload.results: want a non-empty list of tile outputs, have "all"`},
		{"missing results", map[string]any{}, "INVALID_INPUT: tiles_aggregate: payload.results is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := directive(t, tiles.HandlerAggregate, nil, tc.payload)
			out, task, err := workertest.Execute(t, tiles.NewExecutor(), d)
			if tc.wantErr != "" {
				wantPermanent(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			results := tc.payload["results"].([]any)
			var tileSums []string
			var total float64
			for _, r := range results {
				tileSums = append(tileSums, r.(map[string]any)["sha256"].(string))
				total += r.(map[string]any)["bytes"].(float64)
			}
			digest := hexSum([]byte(strings.Join(tileSums, "")))
			want := map[string]any{"tiles": float64(len(results)), "bytes": total, "digest": digest}
			if got := asJSON(t, out.Output); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("output = %v, want %v", got, want)
			}
			arts := task.Artifacts()
			if len(arts) != 1 || arts[0].GetName() != tiles.MosaicArtifact || !strings.HasSuffix(arts[0].GetUri(), "/tiles_aggregate/1/mosaic.json") {
				t.Fatalf("artifacts = %v", arts)
			}
			var m tiles.Mosaic
			if err := json.Unmarshal(workertest.ReadArtifact(t, arts[0]), &m); err != nil || m.Tiles != len(results) ||
				m.Bytes != int64(total) || m.Digest != digest || strings.Join(m.TileSHA256, ",") != strings.Join(tileSums, ",") {
				t.Errorf("mosaic.json = %+v (%v)", m, err)
			}
		})
	}
}

// The whole workflow over one job, as the orchestrator drives it: the plan's
// tiles rendered into each fan-out child's payload, every child writing into
// the same step directory, the fan-in's array of outputs handed to the
// aggregate. The digest equals the one computed directly from the file.
func TestPlanProcessAggregateMatchesTheFile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		size  int
		tiles int
	}{
		{"uneven tiles", 100_003, 7},
		{"more tiles than bytes", 37, 50},
		{"one tile", 4096, 1},
		{"several copy buffers per tile", 3<<20 + 11, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			data := make([]byte, tc.size)
			rand.Read(data)
			exec := tiles.NewExecutor()

			plan := directive(t, tiles.HandlerPlan, data, map[string]any{"tiles": float64(tc.tiles)})
			plan.StepId = "plan"
			planOut, planTask, err := workertest.Execute(t, exec, plan)
			if err != nil {
				t.Fatal(err)
			}
			planRef := planTask.Artifacts()[0].GetUri()
			items := asJSON(t, planOut.Output)["tiles"].([]any)
			if len(items) != tc.tiles {
				t.Fatalf("plan has %d tiles, want %d", len(items), tc.tiles)
			}

			var results []any
			var direct []string
			var covered []byte
			for i, item := range items {
				child := next(t, plan, tiles.HandlerProcess, fmt.Sprintf("split[%d]", i), planRef,
					map[string]any{"tile": item, "index": float64(i), "fail_tile": -1.0})
				out, _, err := workertest.Execute(t, exec, child)
				if err != nil {
					t.Fatalf("tile %d: %v", i, err)
				}
				results = append(results, asJSON(t, out.Output))
				tl := item.(map[string]any)
				off, n := int(tl["offset"].(float64)), int(tl["length"].(float64))
				direct = append(direct, hexSum(data[off:off+n]))
				covered = append(covered, data[off:off+n]...)
			}
			if !bytes.Equal(covered, data) {
				t.Fatal("the plan's ranges do not cover the file exactly once, in order")
			}
			entries, _ := os.ReadDir(filepath.Join(filepath.Dir(filepath.Dir(planTask.StepDir())), "tile_process", "1"))
			if len(entries) != tc.tiles {
				t.Errorf("tile_process/1 holds %d files, want one per tile (%d)", len(entries), tc.tiles)
			}

			agg := next(t, plan, tiles.HandlerAggregate, "aggregate", "file:///gather/has/no/artifact", map[string]any{"results": results})
			agg.FinalStep = true
			out, task, err := workertest.Execute(t, exec, agg)
			if err != nil {
				t.Fatal(err)
			}
			digest := hexSum([]byte(strings.Join(direct, "")))
			got := asJSON(t, out.Output)
			if got["digest"] != digest || got["digest"] != tiles.Digest(direct) || got["bytes"] != float64(tc.size) || got["tiles"] != float64(tc.tiles) {
				t.Errorf("aggregate output = %v, want digest %s over %d bytes", got, digest, tc.size)
			}
			if arts := task.Artifacts(); len(arts) != 1 || arts[0].GetName() != tiles.MosaicArtifact {
				t.Errorf("artifacts = %v, want mosaic.json first", arts)
			}
		})
	}
}

func TestUnknownHandlerFailsPermanently(t *testing.T) {
	t.Parallel()
	d := directive(t, "tiles_stitch", nil, nil)
	_, _, err := workertest.Execute(t, tiles.NewExecutor(), d)
	wantPermanent(t, err,
		`UNKNOWN_HANDLER: handler "tiles_stitch" is not served by service "tiles" (known handlers: tile_process, tiles_aggregate, tiles_plan)`)
}

// equalDecoded compares two JSON documents by value.
func equalDecoded(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}
