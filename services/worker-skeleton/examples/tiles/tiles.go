// Package tiles is the example TILES platform service built on the worker
// skeleton: one service, the three handlers of the tile_mosaic workflow, served
// by one worker.Handlers.
//
//   - tiles_plan splits the job's input into contiguous byte ranges (tiles);
//   - tile_process, run once per tile by the workflow's fan_out, hashes its
//     range of the job's input;
//   - tiles_aggregate, after the fan_in, checks the tiles' results are complete
//     and in order and combines their hashes into one digest.
//
// The placeholder work is real and checkable on inputs of any size: planning
// only stats the input, a tile reads exactly its range (ReadAt, streamed
// through the hash), and the digest is reproducible from the file alone (see
// Digest). Outputs stay small because the orchestrator keeps them: a plan
// output of 1000 tiles is about 40 KiB, a tile's output under 150 bytes.
package tiles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/lucius-platform/lucius/sdk/worker"
	"github.com/lucius-platform/lucius/sdk/worker/blob"
)

// Handler names, as in core/workflow/builtin/handlers.yaml.
const (
	HandlerPlan      = "tiles_plan"
	HandlerProcess   = "tile_process"
	HandlerAggregate = "tiles_aggregate"
)

// MaxTiles is the largest tile count tiles_plan accepts (the workflow's limit).
// Plans of many thousand tiles exceed the 256 KiB inline output limit: the
// runner spills them, and the fan-out then finds no tiles in the output (only
// the claim check); 1000 tiles fit comfortably.
const MaxTiles = 10000

// Artifacts the handlers write.
const (
	PlanArtifact   = "plan"
	PlanFile       = "plan.json"
	TileArtifact   = "tile"
	MosaicArtifact = "mosaic"
	MosaicFile     = "mosaic.json"
	jsonMediaType  = "application/json"
)

// Tile is one contiguous byte range of the job's input: an element of the
// plan, and the tile payload of tile_process.
type Tile struct {
	Index  int   `json:"index"`
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// Plan is the content of plan.json and tiles_plan's output.
type Plan struct {
	Tiles      []Tile `json:"tiles"`
	InputBytes int64  `json:"input_bytes"`
}

// TileResult is the content of tile-<index>.json.
type TileResult struct {
	Index  int    `json:"index"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	SHA256 string `json:"sha256"`
}

// Mosaic is the content of mosaic.json.
type Mosaic struct {
	Tiles      int      `json:"tiles"`
	Bytes      int64    `json:"bytes"`
	Digest     string   `json:"digest"`
	TileSHA256 []string `json:"tile_sha256"`
}

// NewExecutor returns the tiles service's Executor: its three handlers.
func NewExecutor() worker.Handlers {
	return worker.Handlers{
		HandlerPlan:      worker.HandlerFunc(PlanTiles),
		HandlerProcess:   worker.HandlerFunc(ProcessTile),
		HandlerAggregate: worker.HandlerFunc(Aggregate),
	}
}

// Split divides the byte range [0, size) into n contiguous ranges as even as
// possible: the first size%n tiles are one byte longer. When n > size the
// last tiles are empty.
func Split(size int64, n int) []Tile {
	if n <= 0 || size < 0 {
		return nil
	}
	base, extra := size/int64(n), size%int64(n)
	tiles := make([]Tile, n)
	var off int64
	for i := range tiles {
		l := base
		if int64(i) < extra {
			l++
		}
		tiles[i] = Tile{Index: i, Offset: off, Length: l}
		off += l
	}
	return tiles
}

// Digest is the mosaic digest: the hex SHA-256 of the tiles' hex SHA-256
// strings concatenated in index order.
func Digest(tileSHA256 []string) string {
	h := sha256.New()
	for _, s := range tileSHA256 {
		io.WriteString(h, s) //nolint:errcheck // a hash never fails to write
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PlanTiles is tiles_plan. Payload: tiles, an integer in [1, MaxTiles],
// required. It stats the job's input (job_input_ref; never read) and splits
// [0, size) with Split. Output: tiles, a list of {index, offset, length}, and
// input_bytes; plan.json holds the same. A missing or bad tiles, or a
// missing input is a permanent failure.
func PlanTiles(ctx context.Context, t *worker.Task) (worker.Result, error) {
	n, err := t.PayloadInt("tiles", 0, 1, MaxTiles)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerPlan, err)
	}
	if n == 0 {
		return worker.Result{}, worker.Permanentf("%s: payload.tiles is required (an integer in [1, %d])", HandlerPlan, MaxTiles)
	}
	size, err := inputSize(ctx, t, HandlerPlan)
	if err != nil {
		return worker.Result{}, err
	}
	plan := Plan{Tiles: Split(size, n), InputBytes: size}
	body, err := json.Marshal(plan)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: encode plan: %w", HandlerPlan, err)
	}
	if _, err := t.WriteArtifact(ctx, PlanArtifact, PlanFile, jsonMediaType, append(body, '\n')); err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerPlan, err)
	}
	list := make([]any, len(plan.Tiles))
	for i, tile := range plan.Tiles {
		list[i] = map[string]any{"index": tile.Index, "offset": tile.Offset, "length": tile.Length}
	}
	t.Logger().InfoContext(ctx, "tiles planned", "tiles", n, "input_bytes", size)
	return worker.Result{Output: map[string]any{"tiles": list, "input_bytes": size}}, nil
}

// ProcessTile is tile_process. Payload: tile (an object {index, offset,
// length} from the plan), index (its position; must match tile.index) and
// fail_tile (optional integer). It hashes exactly the tile's byte range of
// the job's input, read with ReadAt, and writes tile-<index>.json
// ({index, offset, length, sha256}). Output: index, sha256 and bytes.
//
// fail_tile is a deliberate fault hook for tests and demos: when it equals
// index the tile fails permanently with "tile N is marked to fail
// (fail_tile)". A bad payload, or a range outside the input (the input
// changed since planning) is a permanent failure too.
func ProcessTile(ctx context.Context, t *worker.Task) (worker.Result, error) {
	index, err := t.PayloadInt("index", -1, 0, MaxTiles-1)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerProcess, err)
	}
	if index < 0 {
		return worker.Result{}, worker.Permanentf("%s: payload.index is required", HandlerProcess)
	}
	tile, err := tileParam(t.Payload()["tile"])
	if err != nil {
		return worker.Result{}, worker.Permanentf("%s: payload.tile: %w", HandlerProcess, err)
	}
	if tile.Index != index {
		return worker.Result{}, worker.Permanentf("%s: payload.tile.index %d does not match payload.index %d", HandlerProcess, tile.Index, index)
	}
	failTile, err := t.PayloadInt("fail_tile", -1, math.MinInt32, math.MaxInt32)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerProcess, err)
	}
	if failTile == index {
		return worker.Result{}, worker.Permanent(fmt.Errorf("tile %d is marked to fail (fail_tile)", index))
	}

	ref, err := jobInputRef(t, HandlerProcess)
	if err != nil {
		return worker.Result{}, err
	}
	f, err := t.OpenRef(ctx, ref)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: job input: %w", HandlerProcess, err)
	}
	defer f.Close()
	if tile.Offset+tile.Length > f.Size() {
		return worker.Result{}, worker.Permanentf("%s: tile %d range [%d, %d) lies outside the job input's %d bytes (did it change since planning?)",
			HandlerProcess, index, tile.Offset, tile.Offset+tile.Length, f.Size())
	}
	h := sha256.New()
	n, err := io.Copy(h, blob.ContextReader(ctx, io.NewSectionReader(f, tile.Offset, tile.Length)))
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: read tile %d of %s: %w", HandlerProcess, index, ref, err)
	}
	if n != tile.Length {
		return worker.Result{}, worker.Permanentf("%s: tile %d: read %d bytes of %s, want %d (did it change since planning?)",
			HandlerProcess, index, n, ref, tile.Length)
	}
	res := TileResult{Index: index, Offset: tile.Offset, Length: tile.Length, SHA256: hex.EncodeToString(h.Sum(nil))}
	body, err := json.Marshal(res)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: encode tile %d: %w", HandlerProcess, index, err)
	}
	// Every tile of a job writes into the same step directory; the index keeps the files apart.
	if _, err := t.WriteArtifact(ctx, TileArtifact, "tile-"+strconv.Itoa(index)+".json", jsonMediaType, append(body, '\n')); err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerProcess, err)
	}
	return worker.Result{Output: map[string]any{"index": index, "sha256": res.SHA256, "bytes": res.Length}}, nil
}

// Aggregate is tiles_aggregate. Payload: results, the tile_process outputs in
// index order (the fan_in's output), required. It checks that their indexes
// are 0..n-1 in order, sums their bytes and computes Digest over their
// sha256s. mosaic.json ({tiles, bytes, digest, tile_sha256}) is the primary
// artifact, the job's result on the workflow's last step. Output: tiles,
// bytes and digest. Missing, empty, malformed or out-of-order results are a
// permanent failure.
func Aggregate(ctx context.Context, t *worker.Task) (worker.Result, error) {
	raw, ok := t.Payload()["results"]
	if !ok {
		return worker.Result{}, worker.Permanentf("%s: payload.results is required (the tile_process outputs in index order)", HandlerAggregate)
	}
	results, ok := raw.([]any)
	if !ok || len(results) == 0 {
		return worker.Result{}, worker.Permanentf("%s: payload.results: want a non-empty list of tile outputs, have %s", HandlerAggregate, describe(raw))
	}
	m := Mosaic{Tiles: len(results), TileSHA256: make([]string, len(results))}
	for i, r := range results {
		index, sum, n, err := tileOutput(r)
		if err != nil {
			return worker.Result{}, worker.Permanentf("%s: payload.results[%d]: %w", HandlerAggregate, i, err)
		}
		if index != i {
			return worker.Result{}, worker.Permanentf("%s: payload.results[%d] is tile %d; want the tiles 0..%d in order",
				HandlerAggregate, i, index, len(results)-1)
		}
		m.TileSHA256[i] = sum
		m.Bytes += n
	}
	m.Digest = Digest(m.TileSHA256)
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: encode mosaic: %w", HandlerAggregate, err)
	}
	if _, err := t.WriteArtifact(ctx, MosaicArtifact, MosaicFile, jsonMediaType, append(body, '\n')); err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerAggregate, err)
	}
	t.Logger().InfoContext(ctx, "tiles aggregated", "tiles", m.Tiles, "bytes", m.Bytes, "digest", m.Digest)
	return worker.Result{Output: map[string]any{"tiles": m.Tiles, "bytes": m.Bytes, "digest": m.Digest}}, nil
}

// jobInputRef is the job's original input, which every handler works on
// (input_ref is the upstream step's artifact after the first step).
func jobInputRef(t *worker.Task, handler string) (string, error) {
	ref := t.Directive.GetJobInputRef()
	if ref == "" {
		return "", worker.Permanentf("%s: the directive has no job_input_ref", handler)
	}
	return ref, nil
}

// inputSize stats the job's input.
func inputSize(ctx context.Context, t *worker.Task, handler string) (int64, error) {
	ref, err := jobInputRef(t, handler)
	if err != nil {
		return 0, err
	}
	f, err := t.OpenRef(ctx, ref)
	if err != nil {
		return 0, fmt.Errorf("%s: job input: %w", handler, err)
	}
	defer f.Close()
	return f.Size(), nil
}

// tileParam decodes a tile payload, {index, offset, length}, as rendered
// from a plan entry (JSON numbers).
func tileParam(v any) (Tile, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Tile{}, fmt.Errorf("want an object {index, offset, length}, have %s", describe(v))
	}
	index, err := intField(m, "index", MaxTiles-1)
	if err != nil {
		return Tile{}, err
	}
	off, err := intField(m, "offset", math.MaxInt64)
	if err != nil {
		return Tile{}, err
	}
	length, err := intField(m, "length", math.MaxInt64-off)
	if err != nil {
		return Tile{}, err
	}
	return Tile{Index: int(index), Offset: off, Length: length}, nil
}

// tileOutput decodes one tile_process output, {index, sha256, bytes}.
func tileOutput(v any) (index int, sum string, n int64, err error) {
	m, ok := v.(map[string]any)
	if !ok {
		return 0, "", 0, fmt.Errorf("want a tile output {index, sha256, bytes}, have %s", describe(v))
	}
	i, err := intField(m, "index", MaxTiles-1)
	if err != nil {
		return 0, "", 0, err
	}
	if n, err = intField(m, "bytes", math.MaxInt64); err != nil {
		return 0, "", 0, err
	}
	sum, _ = m["sha256"].(string)
	if !isHexSHA256(sum) {
		return 0, "", 0, fmt.Errorf("sha256 %s: want 64 lowercase hex digits", describe(m["sha256"]))
	}
	return int(i), sum, n, nil
}

// isHexSHA256 accepts what tile_process reports: 64 lowercase hex digits.
func isHexSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// intField reads an integer field in [0, hi] from a decoded JSON object
// (numbers are float64).
func intField(m map[string]any, field string, hi int64) (int64, error) {
	f, ok := m[field].(float64)
	// float64(math.MaxInt64) is 2^63: anything at or above it overflows int64.
	if !ok || f != math.Trunc(f) || f < 0 || f >= float64(math.MaxInt64) || int64(f) > hi {
		return 0, fmt.Errorf("%s: want an integer in [0, %d], have %s", field, hi, describe(m[field]))
	}
	return int64(f), nil
}

// describe shows a payload value in an error message, briefly.
func describe(v any) string {
	if v == nil {
		return "nothing"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	const n = 60
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
