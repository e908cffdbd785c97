package redact

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchSecrets returns n known secrets shaped like the real ones: GitHub
// tokens, hex and base64 API keys, passwords.
func benchSecrets(rng *rand.Rand, n int) []string {
	const b62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	const b64 = b62 + "+/"
	const hex = "0123456789abcdef"
	pick := func(alpha string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		return string(b)
	}
	out := make([]string, n)
	for i := range out {
		switch i % 5 {
		case 0:
			out[i] = "ghp_" + pick(b62, 36)
		case 1:
			out[i] = pick(hex, 40)
		case 2:
			out[i] = pick(b64, 44)
		case 3:
			out[i] = "sk-ant-api03-" + pick(b62, 40)
		default:
			out[i] = pick(b62, 12+rng.IntN(20))
		}
	}
	return out
}

// benchLog builds about size bytes of agent log: JSON tool results, shell
// and build output, git logs and URLs, with a known secret or a
// credential-shaped string about every 50 KB.
func benchLog(rng *rand.Rand, size int, secrets []string) []byte {
	const hex = "0123456789abcdef"
	words := strings.Fields(`the a to of and in is for on with that this file test run build error warning
		module package function return value config server client request response handler index main
		update fix add remove refactor docs flaky timeout retry cache install dependency version`)
	sentence := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = words[rng.IntN(len(words))]
		}
		return strings.Join(w, " ")
	}
	sha := func() string {
		b := make([]byte, 40)
		for i := range b {
			b[i] = hex[rng.IntN(16)]
		}
		return string(b)
	}
	var buf bytes.Buffer
	next := 0
	for buf.Len() < size {
		if buf.Len() >= next {
			next += 50 << 10
			switch rng.IntN(4) {
			case 0:
				fmt.Fprintf(&buf, "remote: https://x-access-token:%s@github.com/acme/app.git\n", secrets[rng.IntN(len(secrets))])
			case 1:
				fmt.Fprintf(&buf, "+ export GITHUB_TOKEN=%s\n", secrets[rng.IntN(len(secrets))])
			case 2:
				fmt.Fprintf(&buf, "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.%s' https://api.acme.dev/v1\n", sha())
			default:
				fmt.Fprintf(&buf, "debug: using key %s for upload\n", secrets[rng.IntN(len(secrets))])
			}
		}
		switch rng.IntN(6) {
		case 0:
			fmt.Fprintf(&buf, `{"type":"tool_result","tool_use_id":"toolu_%s","content":[{"type":"text","text":"%s"}],"is_error":false,"duration_ms":%d}`+"\n",
				sha()[:24], sentence(12+rng.IntN(20)), rng.IntN(5000))
		case 1:
			fmt.Fprintf(&buf, "commit %s\nAuthor: Dev Person <dev%d@acme.dev>\nDate:   Sun Nov 29 18:%02d:00 2026 +0000\n\n    %s\n\n",
				sha(), rng.IntN(50), rng.IntN(60), sentence(8))
		case 2:
			fmt.Fprintf(&buf, "-rw-r--r-- 1 root root %6d Nov 29 18:%02d src/%s_test.go\n", rng.IntN(100000), rng.IntN(60), words[rng.IntN(len(words))])
		case 3:
			fmt.Fprintf(&buf, "--- FAIL: Test%s (0.%02ds)\n    %s_test.go:%d: %s\n", strings.ToUpper(words[rng.IntN(len(words))][:1])+words[rng.IntN(len(words))],
				rng.IntN(100), words[rng.IntN(len(words))], rng.IntN(900), sentence(10))
		case 4:
			fmt.Fprintf(&buf, "npm warn deprecated %s@%d.%d.%d: see https://github.com/acme/%s/pull/%d (task-list, risk-free)\n",
				words[rng.IntN(len(words))], rng.IntN(9), rng.IntN(20), rng.IntN(30), words[rng.IntN(len(words))], rng.IntN(4000))
		default:
			fmt.Fprintf(&buf, "%s: %s %s-%s\n", words[rng.IntN(len(words))], sentence(6), sha()[:8], sha()[:4])
		}
	}
	return buf.Bytes()
}

// naive is the baseline: one strings.ReplaceAll per known secret, then one
// regexp per pattern.
type naive struct {
	secrets  []string
	repl     []string
	patterns []*regexp.Regexp
}

func newNaive(secrets []string) *naive {
	n := &naive{secrets: secrets}
	for _, s := range secrets {
		n.repl = append(n.repl, "…"+s[len(s)-4:])
	}
	for _, p := range []string{
		`\bgh[pousr]_[A-Za-z0-9]{30,}`,
		`\bgithub_pat_[A-Za-z0-9_]{20,}`,
		`\bglpat-[A-Za-z0-9_-]{20,}`,
		`\bnpm_[A-Za-z0-9]{30,}`,
		`\bxox[abpr]-[A-Za-z0-9-]{10,}`,
		`\b(?:AKIA|ASIA)[A-Z0-9]{16,}`,
		`(?:^|[^\w-])sk-[A-Za-z0-9_-]{20,}`,
		`(?i)\bbearer +[A-Za-z0-9\-._~+/=]{12,}`,
		`://[^/?#\s:@]*:[^/?#\s@]+@`,
		`\b[A-Za-z_]*(?:PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|ACCESS_KEY|password|passwd|token|secret|api_?key|access_key)=[^\s"'\x60\\]+`,
		`(?i)"[a-z_]*(?:password|passwd|token|secret|api_?key|access_key)"\s*:\s*"[^"]*"`,
		`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----`,
	} {
		n.patterns = append(n.patterns, regexp.MustCompile(p))
	}
	return n
}

func (n *naive) redact(s string) string {
	for i, sec := range n.secrets {
		s = strings.ReplaceAll(s, sec, n.repl[i])
	}
	for _, re := range n.patterns {
		s = re.ReplaceAllString(s, "…")
	}
	return s
}

var benchData = sync.OnceValues(func() ([]string, []byte) {
	rng := rand.New(rand.NewPCG(1, 2))
	secrets := benchSecrets(rng, 1000)
	return secrets, benchLog(rng, 10<<20, secrets)
})

func benchRedactor(b *testing.B, secrets []string) *Redactor {
	r, err := New(context.Background(), func(context.Context) ([]string, error) { return secrets, nil },
		Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// measure runs the benchmark loop and also reports throughput per CPU
// second of the benchmark's own thread ("MB/cpu-s"): on a shared machine
// the wall-clock MB/s drops with the load, this figure much less.
func measure(b *testing.B, n int, op func()) {
	defer lockThread()()
	b.SetBytes(int64(n))
	var cpu time.Duration
	iters := 0
	for b.Loop() {
		start := threadCPU()
		op()
		cpu += threadCPU() - start
		iters++
	}
	if cpu > 0 {
		b.ReportMetric(float64(n)*float64(iters)/1e6/cpu.Seconds(), "MB/cpu-s")
	}
}

// BenchmarkRedact: ~10 MB of agent log, 1,000 known secrets, every pattern.
// Run: go test -run '^$' -bench Redact -benchtime 3x ./redact/
func BenchmarkRedact(b *testing.B) {
	secrets, data := benchData()
	b.Run("redactor/one-shot", func(b *testing.B) {
		r := benchRedactor(b, secrets)
		measure(b, len(data), func() { r.Bytes(data) })
	})
	b.Run("redactor/writer-32KiB", func(b *testing.B) {
		r := benchRedactor(b, secrets)
		measure(b, len(data), func() {
			w := r.NewWriter(io.Discard)
			for p := data; len(p) > 0; {
				n := min(len(p), 32<<10)
				w.Write(p[:n])
				p = p[n:]
			}
			w.Close()
		})
	})
	b.Run("naive/replaceall+regexp", func(b *testing.B) {
		n := newNaive(secrets)
		s := string(data)
		measure(b, len(data), func() { n.redact(s) })
	})
}

// BenchmarkCompile is the cost of one reload of 1,000 known secrets.
func BenchmarkCompile(b *testing.B) {
	secrets, _ := benchData()
	list, _ := normalize(secrets)
	for b.Loop() {
		compile(list, triggerTexts())
	}
}

// TestBenchCorpus checks the benchmark measures real work: the corpus holds
// known secrets and the redactor removes every one.
func TestBenchCorpus(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	secrets := benchSecrets(rng, 1000)
	data := benchLog(rng, 1<<20, secrets)
	r, err := New(context.Background(), func(context.Context) ([]string, error) { return secrets, nil },
		Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	out := r.Bytes(data).Bytes()
	found := 0
	for _, s := range secrets {
		if bytes.Contains(data, []byte(s)) {
			found++
		}
		if bytes.Contains(out, []byte(s)) {
			t.Fatalf("secret %q survived", s)
		}
	}
	if found < 10 {
		t.Fatalf("corpus holds only %d known secrets", found)
	}
	t.Logf("corpus %d bytes, %d known secrets present, output %d bytes", len(data), found, len(out))
}

// BenchmarkScan is the matcher alone (no output), on the log and on text
// that keeps the automaton in its root state.
func BenchmarkScan(b *testing.B) {
	secrets, data := benchData()
	list, _ := normalize(secrets)
	a := compile(list, triggerTexts())
	b.Logf("%d states × %d classes: %d MiB table", len(a.depth), a.stride, len(a.trans)*4>>20)
	for _, c := range []struct {
		name string
		d    []byte
	}{{"log", data}, {"spaces", bytes.Repeat([]byte(" "), len(data))}} {
		b.Run(c.name, func(b *testing.B) {
			measure(b, len(c.d), func() { a.scan(c.d, nil, true, false, &scratch{}) })
		})
	}
}

// BenchmarkAdversarial: lines built to make pattern checks rescan the line
// (a trigger inside every value); must stay linear, so MB/s should be of
// the same order as on logs.
func BenchmarkAdversarial(b *testing.B) {
	r := benchRedactor(b, nil)
	for _, c := range []struct{ name, unit string }{
		{"assign", "TOKEN="}, {"glpat", "glpat-"}, {"slack", "xoxb-"}, {"reference", "${TOKEN="},
		{"quoted", `PASSWORD="`}, {"bearer", "Bearer "}, {"url", "://"}, {"pem", "-----BEGIN "},
	} {
		data := bytes.Repeat([]byte(c.unit), (1<<20)/len(c.unit))
		b.Run(c.name, func(b *testing.B) {
			measure(b, len(data), func() { r.Bytes(data) })
		})
	}
}

// BenchmarkLine is the per-call cost on one short line (a task, a question,
// one log line), clean and with a token.
func BenchmarkLine(b *testing.B) {
	secrets, _ := benchData()
	r := benchRedactor(b, secrets)
	for _, c := range []struct{ name, line string }{
		{"clean", "--- FAIL: TestFlaky (0.31s) handler_test.go:88: timeout waiting for the server to start"},
		{"token", "remote: https://x-access-token:" + secrets[0] + "@github.com/acme/app.git"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.String(c.line)
			}
		})
	}
}

// BenchmarkWriterByteByByte: a long undecided value written one byte per
// Write (a slow or hostile writer). Held bytes are re-scanned only when they
// double, so this stays linear.
func BenchmarkWriterByteByByte(b *testing.B) {
	r := benchRedactor(b, nil)
	line := []byte("TOKEN=" + strings.Repeat("x", maxHold-16) + "\n")
	measure(b, len(line), func() {
		w := r.NewWriter(io.Discard)
		for i := range line {
			w.Write(line[i : i+1])
		}
		w.Close()
	})
}
