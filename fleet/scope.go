package fleet

import (
	"fmt"

	"sbx.dev/sbx/keys"
)

// need refuses a call made through an API key that lacks the right for it.
// SSH and browser sessions carry no key: their user's role decides. Every
// method of api.go names the right it needs here, once for every front.
func need(caller keys.Actor, want keys.Rights, op string) error {
	if caller.Key == nil {
		return nil
	}
	have := caller.Key.Rights()
	if have.Has(want) {
		return nil
	}
	return fmt.Errorf("%s needs an API key with the %q scope; this key has %s (make one with `ssh <gateway> token create --scope %s`): %w",
		op, want, have, want, ErrScope)
}
