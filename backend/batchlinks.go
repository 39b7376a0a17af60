package backend

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"ludus.dev/ludus/backend/store"
)

// Archive links: a batch run's archive (run.json, results.jsonl and, if the
// run kept them, logs/{game}.inputlog) is downloadable without credentials
// through a link signed with the tenant's link key:
//
//	GET /batch/archives/{tenant}/{run}?exp={unix seconds}&sig={base64url HMAC-SHA256}
//
// The MAC covers the tenant, the run and the expiry, so a link names one
// archive until one moment. Rotating the tenant's key (RotateBatchLinkKey)
// revokes every link signed before; the run's retention deletes the archive.

// BatchArchivePathPrefix is where archive links point.
const BatchArchivePathPrefix = "/batch/archives/"

// linkMAC is the signature of a link.
func linkMAC(key []byte, tenant, run string, exp int64) []byte {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "ludus-batch-archive\n%s\n%s\n%d", tenant, run, exp)
	return m.Sum(nil)
}

// BatchArchiveLink signs a link to a run's archive valid for ttl.
func (s *Server) BatchArchiveLink(ctx context.Context, tenantID, runID string, ttl time.Duration) (string, time.Time, error) {
	set, err := s.batchSettings(ctx, tenantID)
	if err != nil {
		return "", time.Time{}, err
	}
	key := set.LinkKey
	if len(key) == 0 {
		if key, err = s.rotateLinkKey(ctx, tenantID, true); err != nil {
			return "", time.Time{}, err
		}
	}
	exp := s.now().Add(ttl).Truncate(time.Second)
	q := url.Values{"exp": {strconv.FormatInt(exp.Unix(), 10)},
		"sig": {base64.RawURLEncoding.EncodeToString(linkMAC(key, tenantID, runID, exp.Unix()))}}
	return BatchArchivePathPrefix + url.PathEscape(tenantID) + "/" + url.PathEscape(runID) + "?" + q.Encode(), exp, nil
}

// errLink is every refusal of a link that is not expired: the same answer
// whether the tenant, the run or the signature is wrong.
var errLink = errors.New("this link is not valid (wrong signature, or its key was rotated)")

// serveBatchArchive serves GET /batch/archives/{tenant}/{run}.
func (s *Server) serveBatchArchive(w http.ResponseWriter, r *http.Request) {
	tenant, run := r.PathValue("tenant"), r.PathValue("run")
	exp, err := strconv.ParseInt(r.URL.Query().Get("exp"), 10, 64)
	sig, serr := base64.RawURLEncoding.Strict().DecodeString(r.URL.Query().Get("sig"))
	if err != nil || serr != nil || len(sig) != sha256.Size || len(tenant) > 64 || len(run) > 64 {
		http.Error(w, errLink.Error(), http.StatusForbidden)
		return
	}
	ctx := r.Context()
	bs, err := s.batchStore()
	if err != nil {
		http.Error(w, "batch runs are not kept here", http.StatusNotImplemented)
		return
	}
	set, err := bs.BatchSettings(ctx, tenant)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.ErrorContext(ctx, "backend: batch archive settings", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	if len(set.LinkKey) == 0 || !hmac.Equal(sig, linkMAC(set.LinkKey, tenant, run, exp)) {
		http.Error(w, errLink.Error(), http.StatusForbidden)
		return
	}
	if s.now().Unix() >= exp {
		http.Error(w, "this link has expired", http.StatusGone)
		return
	}
	rec, err := bs.BatchRun(ctx, tenant, run)
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, "this run's archive no longer exists (its retention has passed)", http.StatusNotFound)
		return
	} else if err != nil {
		s.log.ErrorContext(ctx, "backend: batch archive run", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.tar.gz"`, run))
	w.Header().Set("Cache-Control", "private, no-store")
	if err := s.writeBatchArchive(ctx, w, rec); err != nil {
		s.log.WarnContext(ctx, "backend: batch archive write", "run", run, "err", err)
	}
}

// batchResultLine is one line of results.jsonl.
type batchResultLine struct {
	Game     int             `json:"game"`
	Map      string          `json:"map"`
	Seed     uint64          `json:"seed"`
	Side     int             `json:"side"`
	Winner   int             `json:"winner"`
	Ticks    int64           `json:"ticks"`
	Ended    bool            `json:"ended"`
	TimedOut bool            `json:"timed_out"`
	CPUSec   float64         `json:"cpu_s"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
	Log      string          `json:"log,omitempty"`
}

// resultLine is r's line of results.jsonl, newline included.
func resultLine(r store.BatchResult) []byte {
	l := batchResultLine{Game: r.Game, Map: r.Map, Seed: r.Seed, Side: r.Side, Winner: r.Winner, Ticks: r.Ticks, Ended: r.Ended,
		TimedOut: r.TimedOut, CPUSec: float64(r.CPUNanos) / 1e9, Error: r.Error}
	if json.Valid(r.Result) {
		l.Result = r.Result
	}
	if r.LogBytes > 0 {
		l.Log = logName(r.Game)
	}
	b, _ := json.Marshal(l)
	return append(b, '\n')
}

func logName(game int) string { return fmt.Sprintf("logs/%06d.inputlog", game) }

// The archive's pages: a run holds up to 100,000 results of up to 1 MiB and
// logs of up to 16 MiB, so the archive is streamed from pages of them and
// never held whole.
var (
	archiveResults = store.BatchResultQuery{Limit: 256, MaxBytes: 8 << 20}
	archiveLogs    = store.BatchResultQuery{Limit: 16, MaxBytes: 32 << 20, WithLogs: true}
)

// writeBatchArchive streams rec's archive to w: run.json, results.jsonl and
// the kept logs. A tar header gives its file's size before the bytes, so
// results.jsonl is read twice, once to size it and once to write it; the
// games found the first time are the archive's, so results stored meanwhile
// (a running run's) are left out of every part alike.
func (s *Server) writeBatchArchive(ctx context.Context, w io.Writer, rec store.BatchRun) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	header := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: rec.CreatedAt, Typeflag: tar.TypeReg})
	}
	put := func(name string, b []byte) error {
		if err := header(name, int64(len(b))); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	runJSON, _ := json.MarshalIndent(map[string]any{
		"run_id": rec.RunID, "state": rec.State, "reason": rec.Reason, "games": rec.Games, "done": rec.Done,
		"cpu_s": float64(rec.CPUNanos) / 1e9, "created_at": rec.CreatedAt, "ended_at": rec.EndedAt, "spec": json.RawMessage(rec.Spec),
	}, "", "  ")
	if err := put("run.json", runJSON); err != nil {
		return err
	}
	archived := make([]bool, rec.Games)
	inArchive := func(game int) bool { return game >= 0 && game < len(archived) && archived[game] }
	var size int64
	err := s.EachBatchResult(ctx, rec.TenantID, rec.RunID, archiveResults, func(r store.BatchResult) error {
		if r.Game >= 0 && r.Game < len(archived) {
			archived[r.Game] = true
			size += int64(len(resultLine(r)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := header("results.jsonl", size); err != nil {
		return err
	}
	err = s.EachBatchResult(ctx, rec.TenantID, rec.RunID, archiveResults, func(r store.BatchResult) error {
		if !inArchive(r.Game) {
			return nil
		}
		_, err := tw.Write(resultLine(r))
		return err
	})
	if err != nil {
		return err
	}
	err = s.EachBatchResult(ctx, rec.TenantID, rec.RunID, archiveLogs, func(r store.BatchResult) error {
		if !inArchive(r.Game) || len(r.Log) == 0 {
			return nil
		}
		return put(logName(r.Game), r.Log)
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}
