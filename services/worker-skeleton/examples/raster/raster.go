// Package raster is the example RASTER platform service built on the worker
// skeleton: one service, three handlers of the raster_processing workflow,
// served by one worker.Handlers.
//
//   - raster_validate checks the job's input file and reports its size, which
//     the workflow's route_by_size node compares with 100 MiB;
//   - raster_cog_fa (the light path, for small files) and raster_cog_docker
//     (the heavy path) "convert" the file to a cloud-optimized GeoTIFF.
//
// The placeholder logic does real, checkable work on local files of any size:
// validation only stats the input, and conversion streams the source into
// <step dir>/cog.tif while hashing it, so memory stays constant. A real raster
// team replaces the conversion (GDAL, a container) and keeps the rest.
package raster

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
	"github.com/lucius-platform/lucius/sdk/worker"
)

// Handler names, as in core/workflow/builtin/handlers.yaml.
const (
	HandlerValidate  = "raster_validate"
	HandlerCOGFA     = "raster_cog_fa"
	HandlerCOGDocker = "raster_cog_docker"
)

// Pipelines recorded in a Manifest.
const (
	PipelineFA     = "fa"
	PipelineDocker = "docker"
)

// Artifacts the handlers write.
const (
	ValidationArtifact = "validation"
	ValidationFile     = "validation.json"
	ManifestArtifact   = "manifest"
	ManifestFile       = "cog.json"
	COGArtifact        = "cog"
	COGFile            = "cog.tif"
	COGMediaType       = "image/tiff; application=geotiff; profile=cloud-optimized"
	jsonMediaType      = "application/json"
)

// mib is the size of a mebibyte: file_size_mb counts MiB.
const mib = 1 << 20

// Validation is raster_validate's output and the content of validation.json.
type Validation struct {
	// FileSizeMB is the size in MiB (bytes / 2^20).
	FileSizeMB    float64 `json:"file_size_mb"`
	Bytes         int64   `json:"bytes"`
	BlobURL       string  `json:"blob_url"`
	ContainerName string  `json:"container_name"`
	BlobName      string  `json:"blob_name"`
}

// Manifest describes a converted file: the output of raster_cog_fa and
// raster_cog_docker and the content of cog.json.
type Manifest struct {
	SourceURL string `json:"source_url"`
	TargetCRS string `json:"target_crs"`
	// Path is the local path of cog.tif.
	Path     string `json:"path"`
	Bytes    int64  `json:"bytes"`
	SHA256   string `json:"sha256"`
	Pipeline string `json:"pipeline"`
}

// NewExecutor returns the raster service's Executor: its three handlers.
func NewExecutor() worker.Handlers {
	return worker.Handlers{
		HandlerValidate:  worker.HandlerFunc(Validate),
		HandlerCOGFA:     worker.HandlerFunc(COGFA),
		HandlerCOGDocker: worker.HandlerFunc(COGDocker),
	}
}

// Validate is raster_validate. Payload: container_name and blob_name,
// required strings. It stats the file input_ref names (the job's input on
// the workflow's first step; the file is never read into memory) and
// reports its size in bytes and MiB, its URL and the names; validation.json
// holds the same. A missing payload field, a missing, unreadable or empty
// input is a permanent failure.
func Validate(ctx context.Context, t *worker.Task) (worker.Result, error) {
	container, err := requiredString(t, HandlerValidate, "container_name")
	if err != nil {
		return worker.Result{}, err
	}
	blob, err := requiredString(t, HandlerValidate, "blob_name")
	if err != nil {
		return worker.Result{}, err
	}
	f, err := t.OpenInput(ctx)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerValidate, err)
	}
	size := f.Size()
	f.Close()
	if size == 0 {
		return worker.Result{}, worker.PermanentCode(worker.CodeInvalidInput,
			fmt.Errorf("%s: input %s is empty, not a raster", HandlerValidate, t.Directive.GetInputRef()))
	}
	v := Validation{
		FileSizeMB: float64(size) / mib, Bytes: size, BlobURL: t.Directive.GetInputRef(),
		ContainerName: container, BlobName: blob,
	}
	if _, err := writeJSON(ctx, t, ValidationArtifact, ValidationFile, v); err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", HandlerValidate, err)
	}
	t.Logger().InfoContext(ctx, "raster validated", "bytes", v.Bytes, "file_size_mb", v.FileSizeMB)
	return worker.Result{Output: map[string]any{
		"file_size_mb": v.FileSizeMB, "bytes": v.Bytes, "blob_url": v.BlobURL,
		"container_name": v.ContainerName, "blob_name": v.BlobName,
	}}, nil
}

// COGFA is raster_cog_fa, the light path for small rasters; see convert.
func COGFA(ctx context.Context, t *worker.Task) (worker.Result, error) {
	return convert(ctx, t, HandlerCOGFA, PipelineFA)
}

// COGDocker is raster_cog_docker, the heavy path for large rasters; see
// convert.
func COGDocker(ctx context.Context, t *worker.Task) (worker.Result, error) {
	return convert(ctx, t, HandlerCOGDocker, PipelineDocker)
}

// convert is the conversion of both pipelines. Payload: source_url (the file
// to convert, as raster_validate reported it) and target_crs, required
// strings. It streams the source into <step dir>/cog.tif, hashing it on the
// way, and writes the manifest cog.json. cog.json is the primary artifact (on
// the workflow's last step, what reaches output_ref), cog.tif the second. The
// output is the manifest's fields. A missing payload field or source is a
// permanent failure.
func convert(ctx context.Context, t *worker.Task, handler, pipeline string) (worker.Result, error) {
	source, err := requiredString(t, handler, "source_url")
	if err != nil {
		return worker.Result{}, err
	}
	crs, err := requiredString(t, handler, "target_crs")
	if err != nil {
		return worker.Result{}, err
	}
	f, err := t.OpenRef(ctx, source)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: source_url: %w", handler, err)
	}
	defer f.Close()
	cog, err := t.WriteArtifactFrom(ctx, COGArtifact, COGFile, COGMediaType, f)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: copy %s: %w", handler, source, err)
	}
	m := Manifest{
		SourceURL: source, TargetCRS: crs, Path: filepath.Join(t.StepDir(), COGFile),
		Bytes: cog.GetSizeBytes(), SHA256: cog.GetSha256(), Pipeline: pipeline,
	}
	manifest, err := writeJSON(ctx, t, ManifestArtifact, ManifestFile, m)
	if err != nil {
		return worker.Result{}, fmt.Errorf("%s: %w", handler, err)
	}
	t.Logger().InfoContext(ctx, "raster converted", "pipeline", pipeline, "bytes", m.Bytes, "target_crs", crs)
	return worker.Result{
		Output: map[string]any{
			"source_url": m.SourceURL, "target_crs": m.TargetCRS, "path": m.Path,
			"bytes": m.Bytes, "sha256": m.SHA256, "pipeline": m.Pipeline,
		},
		Artifacts: []*luciusv1.ArtifactRef{manifest, cog},
	}, nil
}

// requiredString reads a payload field that must be a non-empty string.
func requiredString(t *worker.Task, handler, field string) (string, error) {
	v, err := t.PayloadString(field, "")
	if err != nil {
		return "", fmt.Errorf("%s: %w", handler, err)
	}
	if v == "" {
		return "", worker.PermanentCode(worker.CodeInvalidInput,
			fmt.Errorf("%s: payload.%s is required (a non-empty string)", handler, field))
	}
	return v, nil
}

// writeJSON writes v, indented, as an artifact.
func writeJSON(ctx context.Context, t *worker.Task, name, file string, v any) (*luciusv1.ArtifactRef, error) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", file, err)
	}
	return t.WriteArtifact(ctx, name, file, jsonMediaType, append(body, '\n'))
}
