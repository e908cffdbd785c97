package fleet

import "testing"

// TestParseRepoSpec: REPO[@REF] splits at the last @; an @ at either end
// stays in Repo for the core's checks to refuse.
func TestParseRepoSpec(t *testing.T) {
	for in, want := range map[string]RepoSpec{
		"acme/docs":                         {Repo: "acme/docs"},
		"acme/docs@v2":                      {Repo: "acme/docs", Ref: "v2"},
		"  acme/docs@main \n":               {Repo: "acme/docs", Ref: "main"},
		"https://github.com/acme/docs@v1.2": {Repo: "https://github.com/acme/docs", Ref: "v1.2"},
		"https://u:p@github.com/acme/d@x":   {Repo: "https://u:p@github.com/acme/d", Ref: "x"},
		"acme/docs@":                        {Repo: "acme/docs@"},
		"@v2":                               {Repo: "@v2"},
		"":                                  {},
	} {
		if got := ParseRepoSpec(in); got != want {
			t.Errorf("ParseRepoSpec(%q) = %+v, want %+v", in, got, want)
		}
	}
}
