package redact_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"sbx.dev/sbx/redact"
)

// The core builds one Redactor over the store's secrets and hands fronts
// only redact.Safe values.
func Example() {
	secrets := func(ctx context.Context) ([]string, error) {
		return []string{"my-mcp-header-secret-42"}, nil // from the store, in real life
	}
	r, err := redact.New(context.Background(), secrets, redact.Options{})
	if err != nil {
		panic(err)
	}
	question := r.String("Call the API with my-mcp-header-secret-42? DB_PASSWORD=hunter2 is set.")
	fmt.Println(question)
	// Output: Call the API with …t-42? DB_PASSWORD=… is set.
}

// A live log is redacted once, where it leaves the box: wrap the box's
// output, keep the Writer for the life of the stream, Close it at the end.
func ExampleRedactor_NewWriter() {
	r, _ := redact.New(context.Background(), nil, redact.Options{})
	w := r.NewWriter(os.Stdout)
	// A token split across two chunks is still caught.
	io.WriteString(w, "$ git remote -v\norigin https://x-access-token:ghp_0123456789abcdef")
	io.WriteString(w, "ghijABCDEFGHIJ12WXYZ@github.com/acme/app.git (fetch)\n")
	w.Close()
	// Output:
	// $ git remote -v
	// origin https://x-access-token:ghp_…WXYZ@github.com/acme/app.git (fetch)
}
