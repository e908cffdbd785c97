// Package kubetest holds what the tests against the test cluster
// (hack/cluster) share.
package kubetest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// ApplyRBAC creates in ns the Role and RoleBinding of the manifest at path
// (deploy/rbac.yaml: the gateway's verbs, no more), then waits for the
// namespace's default service account: the service-account admission
// refuses Pods until it exists.
func ApplyRBAC(t testing.TB, cs kubernetes.Interface, ns, path string) {
	t.Helper()
	ctx := context.Background()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, doc := range strings.Split(string(raw), "\n---") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		switch o := obj.(type) {
		case *rbacv1.Role:
			o.Namespace = ns
			_, err = cs.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
			applied++
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
			applied++
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if applied != 2 {
		t.Fatalf("%s: %d Role/RoleBinding objects, want 2", path, applied)
	}
	w, err := cs.CoreV1().ServiceAccounts(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=default"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
		return
	}
	select {
	case <-w.ResultChan():
	case <-time.After(30 * time.Second):
		t.Fatalf("namespace %s: no default service account after 30 s", ns)
	}
}
