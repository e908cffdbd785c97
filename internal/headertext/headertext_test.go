package headertext

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"sbx.dev/sbx/fleet"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       map[string]string
		wantErr    string
	}{
		{name: "empty", text: "", want: map[string]string{}},
		{name: "blank lines only", text: "\n  \r\n\t\n", want: map[string]string{}},
		{name: "one", text: "Authorization: Bearer abc", want: map[string]string{"Authorization": "Bearer abc"}},
		{name: "browser line endings and spaces", text: "  X-Api-Key :  k1 \r\n\r\nX-Team: blue\r\n",
			want: map[string]string{"X-Api-Key": "k1", "X-Team": "blue"}},
		{name: "value with colons", text: "X-Url: https://a.example:8443/x", want: map[string]string{"X-Url": "https://a.example:8443/x"}},
		{name: "empty value", text: "X-Empty:", want: map[string]string{"X-Empty": ""}},
		{name: "later line wins", text: "A: 1\nA: 2", want: map[string]string{"A": "2"}},
		// Names are the core's to judge (an empty one is refused there).
		{name: "empty name passes through", text: ": v", want: map[string]string{"": "v"}},
		{name: "no colon", text: "X-Ok: 1\nAuthorization Bearer s3cret", wantErr: "header line 2: want \"Name: value\""},
		{name: "too long", text: "A: " + strings.Repeat("x", MaxBytes), wantErr: "more than 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.text)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, fleet.ErrInvalid) {
					t.Fatalf("Parse: %v, want %q wrapping fleet.ErrInvalid", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("the error quotes the line: %v", err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("Parse = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
