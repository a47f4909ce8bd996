package trace

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"
)

// Limits on what a trace file may hold, so that one hostile or corrupt file
// cannot take the reader's memory: a 1 GB line would otherwise be held whole
// (several times over) before anything could refuse it.
const (
	// MaxLineBytes bounds one line of a CSV or YAML file.
	MaxLineBytes = 64 << 10
	// MaxFieldBytes bounds one CSV cell.
	MaxFieldBytes = 4 << 10
	// MaxYAMLBytes bounds a whole YAML file, which is parsed in one piece.
	MaxYAMLBytes = 64 << 20
	// MaxGPUsPerMember bounds the GPUs one pod of a job asks for, well
	// below what a Postgres integer holds.
	MaxGPUsPerMember = 1024
)

// boundedLines passes r through until a line runs past max bytes, then
// fails naming that line.
type boundedLines struct {
	r    io.Reader
	max  int
	run  int // bytes of the current line so far
	line int // 1-based number of the current line
	err  error
}

func newBoundedLines(r io.Reader, max int) *boundedLines {
	return &boundedLines{r: r, max: max, line: 1}
}

func (b *boundedLines) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	rest := p[:n]
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			b.run += len(rest)
			break
		}
		if b.run+i > b.max {
			b.run += i
			break
		}
		b.run, b.line, rest = 0, b.line+1, rest[i+1:]
	}
	if b.run > b.max {
		b.err = fmt.Errorf("line %d: longer than %d bytes", b.line, b.max)
		return 0, b.err
	}
	return n, err
}

// readYAML reads a whole YAML document within the line and size limits.
func readYAML(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(newBoundedLines(r, MaxLineBytes), MaxYAMLBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxYAMLBytes {
		return nil, fmt.Errorf("file is larger than %d bytes", MaxYAMLBytes)
	}
	return data, nil
}

// checkText refuses what no name, queue or model may hold: bytes that are
// not UTF-8, NUL (Postgres text refuses it) and other control characters.
func checkText(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("field %s: %q is not valid UTF-8", field, s)
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("field %s: %q holds a control character (%U)", field, s, c)
		}
	}
	return nil
}
