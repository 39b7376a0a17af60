package backend

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Webhooks (AdminService): the endpoint and its deliveries.

// SetWebhook sets the tenant's webhook URL and returns a new signing secret.
func (s *adminService) SetWebhook(ctx context.Context, req *connect.Request[ludusv1.SetWebhookRequest]) (*connect.Response[ludusv1.SetWebhookResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "SetWebhook", needAdmin)
	if err != nil {
		return nil, err
	}
	if req.Msg.Url == "" {
		if err := s.store.PutWebhook(ctx, store.Webhook{TenantID: tenantID}); err != nil {
			return nil, s.internal(ctx, "set webhook", err)
		}
		return connect.NewResponse(&ludusv1.SetWebhookResponse{}), nil
	}
	u, err := s.checkWebhookURL(ctx, req.Msg.Url)
	if err != nil {
		if ctx.Err() != nil {
			return nil, s.internal(ctx, "set webhook", ctx.Err())
		}
		return nil, invalidArg(err)
	}
	secret, _ := newSecret("whsec_")
	if err := s.store.PutWebhook(ctx, store.Webhook{TenantID: tenantID, URL: u.String(), Secret: []byte(secret)}); err != nil {
		return nil, s.internal(ctx, "set webhook", err)
	}
	return connect.NewResponse(&ludusv1.SetWebhookResponse{Secret: secret}), nil
}

// GetWebhook returns the tenant's webhook URL (never its secret, which is
// shown once, when it is set).
func (s *adminService) GetWebhook(ctx context.Context, req *connect.Request[ludusv1.GetWebhookRequest]) (*connect.Response[ludusv1.GetWebhookResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "GetWebhook", needRead)
	if err != nil {
		return nil, err
	}
	w, err := s.store.Webhook(ctx, tenantID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, s.internal(ctx, "get webhook", err)
	}
	return connect.NewResponse(&ludusv1.GetWebhookResponse{Url: w.URL}), nil
}

// ListWebhookDeliveries shows the delivery state of the tenant's webhooks.
func (s *adminService) ListWebhookDeliveries(ctx context.Context, req *connect.Request[ludusv1.ListWebhookDeliveriesRequest]) (*connect.Response[ludusv1.ListWebhookDeliveriesResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ListWebhookDeliveries", needRead)
	if err != nil {
		return nil, err
	}
	ds, err := s.store.ListDeliveries(ctx, tenantID, limitOf(req.Msg.Limit, 50, 500))
	if err != nil {
		return nil, s.internal(ctx, "list deliveries", err)
	}
	out := &ludusv1.ListWebhookDeliveriesResponse{}
	for _, d := range ds {
		out.Deliveries = append(out.Deliveries, &ludusv1.WebhookDelivery{Id: d.ID, Event: d.Event, State: d.State, Attempts: int32(d.Attempts),
			NextAttemptAt: timestamppb.New(d.NextAt), LastError: d.LastError, CreatedAt: timestamppb.New(d.CreatedAt), UpdatedAt: timestamppb.New(d.UpdatedAt)})
	}
	return connect.NewResponse(out), nil
}
