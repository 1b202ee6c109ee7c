// Package braces splits template text into literal text and {{ expression }}
// references: the syntax the workflow and runbook languages share. What an
// expression may say and what it renders to is each language's own (package
// workflow: typed references with paths; package runbook: text variables).
//
// There is no escape: "{{" always opens a reference and the first "}}" after
// it closes it; the expression is what lies between, without surrounding
// spaces.
package braces

import (
	"errors"
	"iter"
	"strings"
)

// The syntax errors, worded for messages that quote the text before them.
var (
	ErrNotClosed  = errors.New("'{{' is not closed")
	ErrCloseAlone = errors.New("'}}' without '{{'")
)

// Mode says where a "}}" outside any reference is an error.
type Mode int

const (
	// Strict refuses a "}}" outside a reference wherever it stands.
	Strict Mode = iota
	// TrailingOnly refuses it only after the last reference, and reads one
	// before a reference as text ("a }} {{ x }}" is "a }} " and x): workflow
	// templates have always been read so, and stored definitions rely on
	// what was accepted.
	TrailingOnly
)

// Piece is literal text or the expression of one reference.
type Piece struct {
	// Text is the literal text, or the expression without surrounding spaces.
	Text  string
	IsRef bool
}

// Pieces yields the pieces of s in order, empty text left out. A syntax
// error is yielded once, last, with a zero Piece; it comes where it stands,
// so a caller that checks each expression as it comes reports the first
// problem of s.
func Pieces(s string, mode Mode) iter.Seq2[Piece, error] {
	return func(yield func(Piece, error) bool) {
		rest := s
		for {
			open := strings.Index(rest, "{{")
			if open < 0 {
				if strings.Contains(rest, "}}") {
					yield(Piece{}, ErrCloseAlone)
				} else if rest != "" {
					yield(Piece{Text: rest}, nil)
				}
				return
			}
			if mode == Strict && strings.Contains(rest[:open], "}}") {
				yield(Piece{}, ErrCloseAlone)
				return
			}
			end := strings.Index(rest[open+2:], "}}")
			if end < 0 {
				yield(Piece{}, ErrNotClosed)
				return
			}
			if open > 0 && !yield(Piece{Text: rest[:open]}, nil) {
				return
			}
			if !yield(Piece{Text: strings.TrimSpace(rest[open+2 : open+2+end]), IsRef: true}, nil) {
				return
			}
			rest = rest[open+2+end+2:]
		}
	}
}
