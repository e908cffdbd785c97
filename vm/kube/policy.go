package kube

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PolicyName is the NetworkPolicy the backend keeps in its namespace.
const PolicyName = "sbx-boxes-deny-all"

// DenyAllPolicy is the NetworkPolicy for the box Pods of namespace ns: no
// ingress, no egress. A box needs neither: the gateway reaches its agent,
// and the box reaches the gateway (egress.go), through exec streams of the
// API server, not the Pod network. It backs up the agent deleting the Pod's
// interfaces on a CNI that enforces NetworkPolicy. deploy/networkpolicy.yaml
// is this object as YAML (a test keeps the two equal).
func DenyAllPolicy(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Namespace: ns, Labels: map[string]string{LabelManaged: managedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelManaged: managedBy}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// ensurePolicy creates the namespace's DenyAllPolicy, or puts back its
// spec when someone changed it. Refusing to start without it is the safe
// side: the gateway's RBAC (deploy/rbac.yaml) grants what this needs.
func (b *Backend) ensurePolicy(ctx context.Context) error {
	want := DenyAllPolicy(b.ns)
	api := b.cs.NetworkingV1().NetworkPolicies(b.ns)
	got, err := api.Get(ctx, PolicyName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubernetes backend: create NetworkPolicy %s/%s: %w", b.ns, PolicyName, err)
		}
		b.log.Info("created the box NetworkPolicy", "name", PolicyName)
		return nil
	case err != nil:
		return fmt.Errorf("kubernetes backend: read NetworkPolicy %s/%s (grant get, create, update on networkpolicies: deploy/rbac.yaml): %w", b.ns, PolicyName, err)
	case apiequality.Semantic.DeepEqual(got.Spec, want.Spec):
		return nil
	}
	got.Spec = want.Spec
	if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubernetes backend: put back NetworkPolicy %s/%s: %w", b.ns, PolicyName, err)
	}
	b.log.Warn("the box NetworkPolicy had been changed: put back", "name", PolicyName)
	return nil
}
