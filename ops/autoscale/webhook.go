package autoscale

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
)

// The Agones FleetAutoscaler webhook types, as in agones.dev/agones
// pkg/apis/autoscaling/v1 (FleetAutoscaleReview, FleetAutoscaleRequest,
// FleetAutoscaleResponse) and pkg/apis/agones/v1 (FleetStatus and its
// aggregates): Agones POSTs a review with Request set and reads Response
// from a 200 answer; any other status is an error and the fleet keeps its size.

// FleetAutoscaleReview is the body of the webhook's request and answer.
type FleetAutoscaleReview struct {
	Request  *FleetAutoscaleRequest  `json:"request"`
	Response *FleetAutoscaleResponse `json:"response"`
}

// FleetAutoscaleRequest describes the fleet to scale.
type FleetAutoscaleRequest struct {
	UID         string            `json:"uid"`
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Status      FleetStatus       `json:"status"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// FleetStatus is an Agones Fleet's status.
type FleetStatus struct {
	Replicas          int32                              `json:"replicas"`
	ReadyReplicas     int32                              `json:"readyReplicas"`
	ReservedReplicas  int32                              `json:"reservedReplicas"`
	AllocatedReplicas int32                              `json:"allocatedReplicas"`
	Players           *AggregatedPlayerStatus            `json:"players,omitempty"`
	Counters          map[string]AggregatedCounterStatus `json:"counters,omitempty"`
	Lists             map[string]AggregatedCounterStatus `json:"lists,omitempty"` // AggregatedListStatus: the same fields
}

// AggregatedPlayerStatus is a fleet's player count and capacity.
type AggregatedPlayerStatus struct {
	Count    int64 `json:"count"`
	Capacity int64 `json:"capacity"`
}

// AggregatedCounterStatus is a fleet's aggregate of one counter (or list).
type AggregatedCounterStatus struct {
	AllocatedCount    int64 `json:"allocatedCount"`
	AllocatedCapacity int64 `json:"allocatedCapacity"`
	Count             int64 `json:"count"`
	Capacity          int64 `json:"capacity"`
}

// FleetAutoscaleResponse is the webhook's decision: Scale false keeps the fleet
// as it is; otherwise Agones sets its replicas to Replicas.
type FleetAutoscaleResponse struct {
	UID      string `json:"uid"`
	Scale    bool   `json:"scale"`
	Replicas int32  `json:"replicas"`
}

// MaxRequestBytes bounds the review the webhook reads. Agones sends the fleet's
// status and, with its FleetAutoscaleRequestMetaData feature, its labels and
// annotations (at most 256 KiB in Kubernetes).
const MaxRequestBytes = 512 << 10

// Config configures a Webhook.
type Config struct {
	// Policy decides the replica count; it must be valid.
	Policy Policy
	// Source lists the free sessions per region; required.
	Source Source
	// Fleets maps an Agones fleet name to the region its sim nodes run in
	// (their --region). A request's ?region= query parameter wins over it.
	// Optional when every FleetAutoscaler names its region in its URL.
	Fleets map[string]string
	// Logger receives one line per decision and every failure to read the
	// fleet; nil logs nothing.
	Logger *slog.Logger
}

// Webhook answers Agones' FleetAutoscaler webhook (policy type Webhook) for
// fleets of sim nodes, one region per fleet. The region is the request's
// ?region= query parameter (a FleetAutoscaler given a url:), else
// Config.Fleets[fleet name] (a FleetAutoscaler given a service:, whose path
// cannot carry a query). A region must be known: named in Config.Fleets, or
// holding at least one registered node; a misspelt region would otherwise
// read as an empty region.
//
// Answers: 200 with the review (Response set); 405 for a method but POST;
// 415 for a body that is not application/json; 413 for a body over
// MaxRequestBytes; 400 for malformed JSON, a missing request or uid, negative
// replicas or no region; 422 for an unknown region; 503 when the Source fails.
// Errors are JSON objects {"error": "..."}.
type Webhook struct {
	cfg   Config
	known map[string]bool // regions named in cfg.Fleets
	log   *slog.Logger
}

// NewWebhook checks cfg and returns the webhook.
func NewWebhook(cfg Config) (*Webhook, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Source == nil {
		return nil, fmt.Errorf("%w: Source is required", ErrInvalidConfig)
	}
	known := make(map[string]bool, len(cfg.Fleets))
	for fleet, region := range cfg.Fleets {
		if fleet == "" || region == "" {
			return nil, fmt.Errorf("%w: Fleets maps %q to %q; neither may be empty", ErrInvalidConfig, fleet, region)
		}
		known[region] = true
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Webhook{cfg: cfg, known: known, log: log}, nil
}

// requestError is a rejected request: its message is safe to show the caller.
type requestError struct {
	status int
	msg    string
}

func reject(status int, format string, args ...any) *requestError {
	return &requestError{status: status, msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one FleetAutoscaleReview (see Webhook for the answers).
func (h *Webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	review, rerr := readReview(w, r)
	if rerr != nil {
		if rerr.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		writeError(w, rerr.status, rerr.msg)
		return
	}
	req := review.Request
	region, rerr := h.region(r, req.Name)
	if rerr != nil {
		writeError(w, rerr.status, rerr.msg)
		return
	}
	free, err := h.cfg.Source(r.Context())
	if err != nil {
		h.log.Error("autoscale: reading the fleet failed", "fleet", req.Name, "region", region, "err", err)
		writeError(w, http.StatusServiceUnavailable, "the fleet's state cannot be read; the fleet keeps its size")
		return
	}
	f, ok := free[region]
	if !ok && !h.known[region] {
		writeError(w, http.StatusUnprocessableEntity, fmt.Sprintf(
			"unknown region %q: no sim node is registered in it and Fleets maps no fleet to it", region))
		return
	}
	current := req.Status.Replicas
	want := h.cfg.Policy.Replicas(current, f)
	h.log.Info("autoscale", "fleet", req.Name, "namespace", req.Namespace, "region", region,
		"free_sessions", f.Sessions, "nodes", f.Nodes, "draining", f.Draining,
		"replicas", current, "want", want, "uid", req.UID)
	review.Response = &FleetAutoscaleResponse{UID: req.UID, Scale: want != current, Replicas: want}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// readReview reads and checks the request's review.
func readReview(w http.ResponseWriter, r *http.Request) (*FleetAutoscaleReview, *requestError) {
	if r.Method != http.MethodPost {
		return nil, reject(http.StatusMethodNotAllowed, "method %s not allowed; POST a FleetAutoscaleReview", r.Method)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, reject(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	var review FleetAutoscaleReview
	err := dec.Decode(&review)
	if err == nil {
		// One JSON value and nothing after it.
		if _, terr := dec.Token(); terr != io.EOF {
			err = terr
			if err == nil {
				err = errors.New("data after the review")
			}
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, reject(http.StatusRequestEntityTooLarge, "the review is larger than %d bytes", MaxRequestBytes)
	case err != nil:
		return nil, reject(http.StatusBadRequest, "the body is not a FleetAutoscaleReview: %v", err)
	case review.Request == nil:
		return nil, reject(http.StatusBadRequest, "request is missing")
	case review.Request.UID == "":
		return nil, reject(http.StatusBadRequest, "request.uid is missing")
	case review.Request.Status.Replicas < 0:
		return nil, reject(http.StatusBadRequest, "request.status.replicas is negative (%d)", review.Request.Status.Replicas)
	}
	return &review, nil
}

// region is the region a request scales.
func (h *Webhook) region(r *http.Request, fleet string) (string, *requestError) {
	if q, ok := r.URL.Query()["region"]; ok {
		if len(q) != 1 || q[0] == "" {
			return "", reject(http.StatusBadRequest, "give one non-empty region= query parameter")
		}
		return q[0], nil
	}
	if region, ok := h.cfg.Fleets[fleet]; ok {
		return region, nil
	}
	return "", reject(http.StatusBadRequest, "no region for fleet %q: add ?region= to the webhook URL or map the fleet in Fleets", fleet)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{msg})
}
