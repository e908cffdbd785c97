package web

import (
	"net/http"
	"time"

	"sbx.dev/sbx/fleet"
	"sbx.dev/sbx/keys"
	"sbx.dev/sbx/views"
)

// extend is the box page's form pushing the deadline out (by: 30m, 2h).
func extend(r *http.Request, core boxes, caller keys.Actor, name string) (string, error) {
	by, err := fleet.ParseExtension(r.PostFormValue("by"))
	if err != nil {
		return "", err
	}
	b, err := core.Extend(r.Context(), caller, name, by)
	if err != nil {
		return "", err
	}
	return "Deadline moved to " + b.Deadline.UTC().Format(time.RFC3339) + ".", nil
}

// sizeFields puts the delegate form's memory and vCPUs into req, parsed
// by the core's rules.
func sizeFields(req *fleet.DelegateRequest, f views.DelegateForm) error {
	var err error
	if req.MemoryMiB, err = fleet.ParseMemory(f.Memory); err != nil {
		return err
	}
	req.VCPUs, err = fleet.ParseCPUs(f.CPUs)
	return err
}
