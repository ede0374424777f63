package opencode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// MaxSSELine bounds one SSE line (and one event's data). OpenCode puts whole
// tool outputs and message snapshots in single data lines, so this is large.
const MaxSSELine = 16 << 20

// ErrLineTooLong is returned when an SSE line exceeds the limit.
var ErrLineTooLong = errors.New("sse: line too long")

// Frame is one server-sent event as the HTML spec defines it.
type Frame struct {
	ID    string
	Event string
	Data  string
	Retry int // milliseconds, 0 when absent
}

// SSEReader parses a text/event-stream. It handles LF, CRLF and CR line
// endings, comments, multi-line data and lines of any length up to its
// limit, whatever the underlying reads return.
type SSEReader struct {
	r       *bufio.Reader
	maxLine int
	line    []byte
	pendCR  bool   // the last line ended with CR; skip a following LF
	lastID  string // the last event ID persists across events, per spec
}

// NewSSEReader reads frames from r; maxLine ≤ 0 means MaxSSELine.
func NewSSEReader(r io.Reader, maxLine int) *SSEReader {
	if maxLine <= 0 {
		maxLine = MaxSSELine
	}
	return &SSEReader{r: bufio.NewReaderSize(r, 64<<10), maxLine: maxLine}
}

// readLine returns the next line without its terminator.
func (s *SSEReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && len(s.line) > 0 {
				// An unterminated last line is discarded per spec, but
				// report EOF only after it.
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if s.pendCR {
			s.pendCR = false
			if b == '\n' {
				continue
			}
		}
		switch b {
		case '\n':
			return s.line, nil
		case '\r':
			s.pendCR = true
			return s.line, nil
		}
		if len(s.line) >= s.maxLine {
			return nil, fmt.Errorf("%w (limit %d bytes)", ErrLineTooLong, s.maxLine)
		}
		s.line = append(s.line, b)
		// Fast path: copy the rest of a long line in one go.
		if buffered := s.r.Buffered(); buffered > 0 {
			peek, _ := s.r.Peek(buffered)
			if i := bytes.IndexAny(peek, "\r\n"); i != 0 {
				n := i
				if i < 0 {
					n = len(peek)
				}
				if room := s.maxLine - len(s.line) + 1; n > room {
					n = room
				}
				s.line = append(s.line, peek[:n]...)
				_, _ = s.r.Discard(n)
				if len(s.line) > s.maxLine {
					return nil, fmt.Errorf("%w (limit %d bytes)", ErrLineTooLong, s.maxLine)
				}
			}
		}
	}
}

// Next returns the next dispatched frame (one with data). It returns io.EOF
// when the stream ends cleanly between frames.
func (s *SSEReader) Next() (Frame, error) {
	f := Frame{ID: s.lastID}
	var data bytes.Buffer
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return Frame{}, io.EOF
			}
			return Frame{}, err
		}
		if len(line) == 0 {
			if hasData {
				f.Data = data.String()
				return f, nil
			}
			f = Frame{ID: s.lastID}
			continue
		}
		if line[0] == ':' {
			continue // comment
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			if data.Len()+len(value) > s.maxLine {
				return Frame{}, fmt.Errorf("%w (event data over %d bytes)", ErrLineTooLong, s.maxLine)
			}
			data.Write(value)
			hasData = true
		case "event":
			f.Event = string(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				s.lastID = string(value)
				f.ID = s.lastID
			}
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
				f.Retry = n
			}
		}
	}
}
