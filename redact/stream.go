package redact

import "io"

// Writer redacts a stream on its way to dst. It is correct at any chunking:
// it holds back only the bytes that could still begin a match and emits
// them at the next line end (or at Close), so a secret split across Write
// calls is still replaced. A private-key block is swallowed as it arrives
// and replaced at its END line.
//
// A Writer is not safe for concurrent use. Each Write uses the newest
// known-secret list.
type Writer struct {
	r      *Redactor
	dst    io.Writer
	st     stream
	out    []byte
	err    error
	closed bool
}

// NewWriter returns a Writer that sends redacted bytes to dst.
func (r *Redactor) NewWriter(dst io.Writer) *Writer { return &Writer{r: r, dst: dst} }

// Write consumes all of p and forwards what is decided.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, io.ErrClosedPipe
	}
	w.out = w.st.feed(w.r.current(), w.out[:0], p, false)
	return len(p), w.send()
}

// Close emits what was held back as the end of the stream. It does not
// close dst.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		return w.err
	}
	w.out = w.st.feed(w.r.current(), w.out[:0], nil, true)
	return w.send()
}

// Flush decides what is held back as if the stream ended here and goes on.
// It is for interactive streams (a terminal) where holding a keystroke's
// echo until the next line end is worse than missing a secret that a slow
// writer split across a pause: a secret written in one piece is still
// replaced.
func (w *Writer) Flush() error {
	if w.closed || w.err != nil {
		return w.err
	}
	w.out = w.st.feed(w.r.current(), w.out[:0], nil, true)
	return w.send()
}

// Held returns how many input bytes wait for more input (for tests and
// metrics).
func (w *Writer) Held() int { return len(w.st.buf) }

func (w *Writer) send() error {
	if len(w.out) == 0 {
		return nil
	}
	if _, err := w.dst.Write(w.out); err != nil {
		w.err = err
	}
	return w.err
}

// Reader redacts what it reads from src, with the same guarantees as
// Writer. The end of src (io.EOF or an error) ends the stream: what was
// held back is decided and returned before the error.
type Reader struct {
	r   *Redactor
	src io.Reader
	st  stream
	in  []byte
	out []byte
	off int
	err error
}

// NewReader returns a Reader over src.
func (r *Redactor) NewReader(src io.Reader) *Reader {
	return &Reader{r: r, src: src, in: make([]byte, 32<<10)}
}

// Read implements io.Reader.
func (rd *Reader) Read(p []byte) (int, error) {
	for rd.off == len(rd.out) {
		if rd.err != nil {
			return 0, rd.err
		}
		n, err := rd.src.Read(rd.in)
		rd.out, rd.off = rd.st.feed(rd.r.current(), rd.out[:0], rd.in[:n], err != nil), 0
		rd.err = err
	}
	n := copy(p, rd.out[rd.off:])
	rd.off += n
	return n, nil
}
