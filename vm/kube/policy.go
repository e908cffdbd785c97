package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sbx.dev/sbx/vm"
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

// QuotaName is the ResourceQuota that holds the namespace's caps.
const QuotaName = "sbx-boxes-caps"

// CapsQuota is the ResourceQuota of Config.MaxBoxes and MaxMemoryMiB: at
// most that many box Pods (running boxes: a sleeping box has none) and that
// much memory in their limits, RuntimeClass overhead included. The API
// server enforces it for every gateway at once; nil when both are 0.
func CapsQuota(ns string, maxBoxes, maxMemoryMiB int) *corev1.ResourceQuota {
	hard := corev1.ResourceList{}
	if maxBoxes > 0 {
		hard[corev1.ResourcePods] = *resource.NewQuantity(int64(maxBoxes), resource.DecimalSI)
	}
	if maxMemoryMiB > 0 {
		hard[corev1.ResourceLimitsMemory] = *resource.NewQuantity(int64(maxMemoryMiB)<<20, resource.BinarySI)
	}
	if len(hard) == 0 {
		return nil
	}
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: QuotaName, Namespace: ns, Labels: map[string]string{LabelManaged: managedBy}},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}
}

// ensureQuota makes the namespace's caps quota match the configuration
// (created, put back, or deleted when there are no caps). Gateways sharing
// a namespace must agree on the caps.
func (b *Backend) ensureQuota(ctx context.Context) error {
	want := CapsQuota(b.ns, b.cfg.MaxBoxes, b.cfg.MaxMemoryMiB)
	api := b.cs.CoreV1().ResourceQuotas(b.ns)
	got, err := api.Get(ctx, QuotaName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && want == nil:
		return nil
	case apierrors.IsNotFound(err):
		if _, err := api.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubernetes backend: create ResourceQuota %s/%s: %w", b.ns, QuotaName, err)
		}
		return b.quotaInForce(ctx, want)
	case err != nil:
		return fmt.Errorf("kubernetes backend: read ResourceQuota %s/%s (grant get, create, update, delete on resourcequotas: deploy/rbac.yaml): %w", b.ns, QuotaName, err)
	case want == nil:
		if err := api.Delete(ctx, QuotaName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("kubernetes backend: delete ResourceQuota %s/%s (no caps configured): %w", b.ns, QuotaName, err)
		}
		return nil
	case apiequality.Semantic.DeepEqual(got.Spec.Hard, want.Spec.Hard):
		return nil
	}
	b.log.Info("box caps changed", "from", got.Spec.Hard, "to", want.Spec.Hard)
	got.Spec = want.Spec
	if _, err := api.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubernetes backend: update ResourceQuota %s/%s: %w", b.ns, QuotaName, err)
	}
	return b.quotaInForce(ctx, want)
}

// quotaInForce waits until the cluster's quota controller has counted the
// quota (status.hard = spec.hard), watching it: until then the API server
// refuses every Pod with "status unknown for quota".
func (b *Backend) quotaInForce(ctx context.Context, want *corev1.ResourceQuota) error {
	ctx, cancel := context.WithTimeoutCause(ctx, time.Minute, fmt.Errorf(
		"kubernetes backend: ResourceQuota %s/%s not counted by the cluster's quota controller after a minute (is kube-controller-manager running?)", b.ns, QuotaName))
	defer cancel()
	api := b.cs.CoreV1().ResourceQuotas(b.ns)
	counted := func(q *corev1.ResourceQuota) bool {
		return apiequality.Semantic.DeepEqual(q.Status.Hard, want.Spec.Hard)
	}
	for {
		got, err := api.Get(ctx, QuotaName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("kubernetes backend: read ResourceQuota %s/%s: %w", b.ns, QuotaName, err)
		}
		if counted(got) {
			return nil
		}
		w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + QuotaName, ResourceVersion: got.ResourceVersion})
		if err != nil {
			return fmt.Errorf("kubernetes backend: watch ResourceQuota %s/%s: %w", b.ns, QuotaName, err)
		}
		for ev := range w.ResultChan() {
			if q, ok := ev.Object.(*corev1.ResourceQuota); ok && counted(q) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
}

// capErr turns a Pod refused by the caps quota into vm.ErrLimit naming the
// configured caps; other errors are returned as they are.
func (b *Backend) capErr(err error) error {
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
		return err
	}
	msg := err.Error()
	if i := strings.Index(msg, "exceeded quota"); i >= 0 {
		msg = msg[i:]
	}
	return fmt.Errorf("%w: the cluster's box caps (vm.max_boxes %d, vm.max_memory_mib %d; ResourceQuota %s/%s): %s",
		vm.ErrLimit, b.cfg.MaxBoxes, b.cfg.MaxMemoryMiB, b.ns, QuotaName, msg)
}
