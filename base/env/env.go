// Package env reads typed settings from environment variables for a main
// package, collecting every problem so a misconfigured process reports all of
// them at once. Only main packages read the environment; everything below takes
// a config struct.
package env

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Reader reads variables through a lookup function (os.LookupEnv by default).
type Reader struct {
	lookup func(string) (string, bool)
	errs   []error
}

// New reads the process environment.
func New() *Reader { return &Reader{lookup: os.LookupEnv} }

// FromMap reads from a map, for tests.
func FromMap(m map[string]string) *Reader {
	return &Reader{lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

func (r *Reader) get(key string) (string, bool) {
	v, ok := r.lookup(key)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// String returns the value or def.
func (r *Reader) String(key, def string) string {
	if v, ok := r.get(key); ok {
		return v
	}
	return def
}

// Required returns the value, recording an error when it is unset.
func (r *Reader) Required(key string) string {
	v, ok := r.get(key)
	if !ok {
		r.errs = append(r.errs, fmt.Errorf("%s is required", key))
	}
	return v
}

// Int returns the integer value or def.
func (r *Reader) Int(key string, def int) int {
	v, ok := r.get(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want an integer", key, v))
		return def
	}
	return n
}

// Duration returns the duration value (Go syntax, e.g. 30s, 2m) or def.
func (r *Reader) Duration(key string, def time.Duration) time.Duration {
	v, ok := r.get(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want a duration such as 30s or 2m", key, v))
		return def
	}
	return d
}

// Bool returns the boolean value or def.
func (r *Reader) Bool(key string, def bool) bool {
	v, ok := r.get(key)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want true or false", key, v))
		return def
	}
	return b
}

// List returns the comma-separated values (trimmed, empty ones dropped) or def.
func (r *Reader) List(key string, def []string) []string {
	v, ok := r.get(key)
	if !ok {
		return def
	}
	return SplitList(v)
}

// SplitList splits a comma-separated list, trimming spaces and dropping
// empty items.
func SplitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Err reports every problem met so far.
func (r *Reader) Err() error { return errors.Join(r.errs...) }

// Fail records a problem found while interpreting settings (a parsed value
// that is invalid), reported by Err with the rest.
func (r *Reader) Fail(err error) {
	if err != nil {
		r.errs = append(r.errs, err)
	}
}
