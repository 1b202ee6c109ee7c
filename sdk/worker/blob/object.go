package blob

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// remoteObject is an Object served over HTTP (https refs, az blobs): Read
// streams the body of the one full download Open started, ReadAt fetches the
// range it needs.
type remoteObject struct {
	ref  string
	size int64 // -1 when the server did not say
	// fetch returns the body of bytes [off, off+n) (or fewer at the end).
	fetch func(off, n int64) (io.ReadCloser, error)
	// classify turns a failure while reading a body into a blob error.
	classify func(error) error

	mu   sync.Mutex
	body io.ReadCloser
}

func (o *remoteObject) Size() int64 { return o.size }

func (o *remoteObject) Read(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.body.Read(p)
	if err != nil && err != io.EOF {
		err = readError(o.ref, o.classify(err))
	}
	return n, err
}

func (o *remoteObject) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.body.Close()
}

func (o *remoteObject) ReadAt(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset %d", Clip(o.ref), off)
	}
	if o.size >= 0 && off >= o.size {
		return 0, io.EOF
	}
	body, err := o.fetch(off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer body.Close()
	n, err := io.ReadFull(body, p)
	switch {
	case err == nil:
	case errors.Is(err, io.ErrUnexpectedEOF) && o.size >= 0 && off+int64(n) >= o.size:
		err = io.EOF // the range ran past the end
	default:
		// A range cut short before the object's end is a failed read
		// (retryable), not the end of the data.
		err = readError(o.ref, o.classify(err))
	}
	return n, err
}
