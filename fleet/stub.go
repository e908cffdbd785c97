package fleet

import (
	"context"
	"errors"
	"path/filepath"

	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/redact"
)

var errNotYet = errors.New("fleet: not implemented yet")

type pool struct{}

// LogStream is a redacted view of a box's log from an offset.
type LogStream struct{}

// Chunk is a piece of log text that ends at a line end (or at the end of a
// finished log), and the raw offset to resume after it.
type Chunk struct {
	Text   redact.Safe
	Offset int64
}

// Next returns the next chunk; io.EOF at the end.
func (s *LogStream) Next(ctx context.Context) (Chunk, error) { return Chunk{}, errNotYet }

// Read reads redacted log bytes.
func (s *LogStream) Read(p []byte) (int, error) { return 0, errNotYet }

// Offset is the raw offset after what was returned so far.
func (s *LogStream) Offset() int64 { return 0 }

// Close ends the stream.
func (s *LogStream) Close() error { return nil }

func (f *Fleet) delegate(ctx context.Context, caller keys.Actor, req DelegateRequest) (Box, error) {
	return Box{}, errNotYet
}
func (f *Fleet) logs(ctx context.Context, caller keys.Actor, name string, from int64, follow bool) (*LogStream, error) {
	return nil, errNotYet
}
func (f *Fleet) answer(ctx context.Context, caller keys.Actor, name, text string, force bool) (AnswerResult, error) {
	return AnswerResult{}, errNotYet
}
func (f *Fleet) inbox(ctx context.Context, caller keys.Actor, name string) ([]InboxItem, error) {
	return nil, errNotYet
}
func (f *Fleet) removeInbox(ctx context.Context, caller keys.Actor, name string, id int64) error {
	return errNotYet
}
func (f *Fleet) ask(ctx context.Context, caller keys.Actor, name, question string, fresh bool) (redact.Safe, error) {
	return redact.Safe{}, errNotYet
}
func (f *Fleet) diff(ctx context.Context, caller keys.Actor, name string) (Diff, error) {
	return Diff{}, errNotYet
}
func (f *Fleet) sleep(ctx context.Context, caller keys.Actor, name, why string) (Box, error) {
	return Box{}, errNotYet
}
func (f *Fleet) wake(ctx context.Context, caller keys.Actor, name string) (Box, error) {
	return Box{}, errNotYet
}
func (f *Fleet) wakeLocked(ctx context.Context, caller keys.Actor, rec *record) error {
	return errNotYet
}
func (f *Fleet) destroy(ctx context.Context, caller keys.Actor, name string) error { return errNotYet }
func (f *Fleet) poolStatus(ctx context.Context, caller keys.Actor) (PoolStatus, error) {
	return PoolStatus{}, errNotYet
}
func (f *Fleet) setPool(ctx context.Context, caller keys.Actor, n int) (PoolStatus, error) {
	return PoolStatus{}, errNotYet
}
func (f *Fleet) recover(ctx context.Context) error { return nil }
func (f *Fleet) tickLoop()                         { f.wg.Done() }
func (f *Fleet) watchVM()                          { f.wg.Done() }
func (f *Fleet) logPath(name string) string        { return filepath.Join(f.dataDir, "logs", name+".log") }
func cleanAllow(d []string) ([]string, error)      { return d, nil }
