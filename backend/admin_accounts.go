package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"ludus.dev/ludus/backend/store"
	ludusv1 "ludus.dev/ludus/gen/ludus/v1"
)

// Accounts (AdminService): create, look up, delete, export.

func accountProto(a store.Account) *ludusv1.Account {
	return &ludusv1.Account{Id: a.ID, DisplayName: a.DisplayName, DeviceId: a.DeviceID, Email: a.Email, CustomId: a.CustomID,
		HasPassword: a.PasswordHash != "", CreatedAt: timestamppb.New(a.CreatedAt), UpdatedAt: timestamppb.New(a.UpdatedAt)}
}

// CreateAccount creates an account for the studio's backend.
func (s *adminService) CreateAccount(ctx context.Context, req *connect.Request[ludusv1.CreateAccountRequest]) (*connect.Response[ludusv1.CreateAccountResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "CreateAccount", needWrite)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	now := s.now().UTC()
	a := store.Account{ID: newID("a_"), TenantID: tenantID, CreatedAt: now, UpdatedAt: now}
	if a.DisplayName, err = cleanName("display_name", m.DisplayName, MaxDisplayNameLen); err != nil {
		return nil, invalidArg(err)
	}
	if m.CustomId != "" {
		if err := checkText("custom_id", m.CustomId, MaxCustomIDLen); err != nil {
			return nil, invalidArg(err)
		}
		a.CustomID = m.CustomId
	}
	if m.DeviceId != "" {
		if err := checkDeviceID(m.DeviceId); err != nil {
			return nil, invalidArg(err)
		}
		a.DeviceID = m.DeviceId
	}
	if m.Email != "" || m.Password != "" {
		if a.Email, err = cleanEmail(m.Email); err != nil {
			return nil, invalidArg(err)
		}
		if err := checkPasswordValue(m.Password); err != nil {
			return nil, invalidArg(err)
		}
		if a.PasswordHash, err = s.hashPasswordInTurn(ctx, m.Password); err != nil {
			return nil, err
		}
	}
	if a.CustomID == "" && a.DeviceID == "" && a.Email == "" {
		return nil, invalidArg(errors.New("give at least one of custom_id, email (with password) or device_id"))
	}
	if a.DisplayName == "" {
		a.DisplayName = guestName(a.ID)
	}
	// Throttled per tenant, like every account creation.
	signup, err := s.reserveSignup(tenantID, "", nil)
	if err != nil {
		return nil, err
	}
	if err := s.store.CreateAccount(ctx, a); errors.Is(err, store.ErrAlreadyExists) {
		signup.release()
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("an account with this custom id, email or device exists"))
	} else if err != nil {
		signup.release()
		return nil, s.internal(ctx, "create account", err)
	}
	return connect.NewResponse(&ludusv1.CreateAccountResponse{Account: accountProto(a)}), nil
}

// account loads an account of the tenant: NotFound for ids of other tenants.
func (s *Server) account(ctx context.Context, tenantID, id string) (store.Account, error) {
	if err := checkAccountID("account_id", id); err != nil {
		return store.Account{}, invalidArg(err)
	}
	a, err := s.store.AccountByID(ctx, tenantID, id)
	if errors.Is(err, store.ErrNotFound) {
		return a, connect.NewError(connect.CodeNotFound, fmt.Errorf("no account %q in this tenant", id))
	} else if err != nil {
		return a, s.internal(ctx, "account", err)
	}
	return a, nil
}

// GetAccount looks an account up by one of its ids. The device id is a
// guest's only credential (GuestLogin needs nothing else), so only an admin
// key is told it, or a caller who looked the account up by it: a read-only
// or server key must not be a way to sign in as any guest.
func (s *adminService) GetAccount(ctx context.Context, req *connect.Request[ludusv1.GetAccountRequest]) (*connect.Response[ludusv1.GetAccountResponse], error) {
	tenantID, scope, err := s.tenantScope(ctx, req.Header(), "GetAccount", needRead)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	var a store.Account
	byDevice := false // looked up by the device id (the caller knows it)
	switch {
	case m.Id != "":
		a, err = s.account(ctx, tenantID, m.Id)
		if err != nil {
			return nil, err
		}
	case m.CustomId != "":
		if err := checkText("custom_id", m.CustomId, MaxCustomIDLen); err != nil {
			return nil, invalidArg(err)
		}
		a, err = s.store.AccountByCustomID(ctx, tenantID, m.CustomId)
	case m.Email != "":
		email, cerr := cleanEmail(m.Email)
		if cerr != nil {
			return nil, invalidArg(cerr)
		}
		a, err = s.store.AccountByEmail(ctx, tenantID, email)
	case m.DeviceId != "":
		if err := checkDeviceID(m.DeviceId); err != nil {
			return nil, invalidArg(err)
		}
		a, err = s.store.AccountByDevice(ctx, tenantID, m.DeviceId)
		byDevice = true
	default:
		return nil, invalidArg(errors.New("give one of id, custom_id, email or device_id"))
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such account in this tenant"))
	} else if err != nil {
		return nil, s.internal(ctx, "get account", err)
	}
	acc := accountProto(a)
	if scope != ScopeAdmin && !byDevice {
		acc.DeviceId = ""
	}
	return connect.NewResponse(&ludusv1.GetAccountResponse{Account: acc}), nil
}

// DeleteAccount deletes an account and its data.
func (s *adminService) DeleteAccount(ctx context.Context, req *connect.Request[ludusv1.DeleteAccountRequest]) (*connect.Response[ludusv1.DeleteAccountResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "DeleteAccount", needAdmin)
	if err != nil {
		return nil, err
	}
	if err := checkAccountID("id", req.Msg.Id); err != nil {
		return nil, invalidArg(err)
	}
	if err := s.store.DeleteAccount(ctx, tenantID, req.Msg.Id); errors.Is(err, store.ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no account %q in this tenant", req.Msg.Id))
	} else if err != nil {
		return nil, s.internal(ctx, "delete account", err)
	}
	s.log.InfoContext(ctx, "backend: account deleted", "tenant", tenantID, "account", req.Msg.Id)
	return connect.NewResponse(&ludusv1.DeleteAccountResponse{}), nil
}

// Exports.
const (
	// MaxExportBytes bounds the JSON of one ExportAccount, and so the memory
	// an export takes (the JSON, then the answer's copy of it): an account
	// whose export would be larger is refused, ResourceExhausted, never cut
	// short. 64 MiB holds about 250,000 ledger entries, or years of play:
	// each report also keeps a change key, and each result a row
	// (docs/RATIONALE.md, "Why an account export is one answer").
	MaxExportBytes = 64 << 20
	// exportsAtOnce bounds the exports a backend builds at once, and so
	// their memory together; others wait for a turn up to exportWait.
	exportsAtOnce = 2
	exportWait    = 30 * time.Second
)

// ExportAccount returns everything stored about an account as JSON (no
// secrets: no password hash, no refresh token or its hash): one query per
// kind of record, each streamed from the store into the JSON, not loaded
// whole; all of them, or a refusal naming the sizes if the JSON would pass
// MaxExportBytes.
func (s *adminService) ExportAccount(ctx context.Context, req *connect.Request[ludusv1.ExportAccountRequest]) (*connect.Response[ludusv1.ExportAccountResponse], error) {
	tenantID, err := s.tenantCall(ctx, req.Header(), "ExportAccount", needAdmin)
	if err != nil {
		return nil, err
	}
	a, err := s.account(ctx, tenantID, req.Msg.Id)
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(exportWait)
	defer t.Stop()
	select {
	case s.exportTurns <- struct{}{}:
		defer func() { <-s.exportTurns }()
	case <-ctx.Done():
		return nil, s.internal(ctx, "export", ctx.Err())
	case <-t.C:
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("%d exports are running on this server, the most at once: try again in a minute", exportsAtOnce))
	}
	data, err := s.exportJSON(ctx, tenantID, a)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&ludusv1.ExportAccountResponse{Data: data}), nil
}

// The elements of an export's arrays, as the JSON names their fields.
type (
	exportMatch struct {
		MatchID string             `json:"match_id"`
		Game    string             `json:"game"`
		EndedAt string             `json:"ended_at"`
		Result  store.PlayerReport `json:"result"`
	}
	// exportUnfinishedMatch is a match the account was reported in that
	// has no final result yet (or never will: abandoned).
	exportUnfinishedMatch struct {
		MatchID   string             `json:"match_id"`
		Game      string             `json:"game"`
		CreatedAt time.Time          `json:"created_at"`
		Reported  store.PlayerReport `json:"reported"` // the totals of its latest report
	}
	exportAppliedChange struct {
		Key string    `json:"key"`
		At  time.Time `json:"at"`
	}
	// exportRosterEntry is a match a gateway registered the account as a
	// player of (its roster), whether or not it was ever reported in.
	exportRosterEntry struct {
		MatchID string    `json:"match_id"`
		AddedAt time.Time `json:"added_at"`
	}
	exportBoard struct {
		Board   string `json:"board"`
		Best    int64  `json:"best"`
		Sum     int64  `json:"sum"`
		Matches int64  `json:"matches"`
	}
	exportRating struct {
		Mode       string    `json:"mode"`
		Rating     float64   `json:"rating"`
		RD         float64   `json:"rd"`
		Volatility float64   `json:"volatility"`
		Matches    int64     `json:"matches"`
		UpdatedAt  time.Time `json:"updated_at"`
	}
	exportSession struct {
		FirstTokenAt time.Time `json:"first_token_at"`
		LastTokenAt  time.Time `json:"last_token_at"`
		ExpiresAt    time.Time `json:"expires_at"`
		Revoked      bool      `json:"revoked"`
	}
	exportSignInThrottle struct {
		Failures    int       `json:"failures"`
		LastFailure time.Time `json:"last_failure"`
		LockedUntil time.Time `json:"locked_until"`
	}
)

// exportJSON writes an account's export as json.MarshalIndent would write
// a map of its keys (so in their order by name; the existing keys as they
// were when exports were built in memory whole), one element of each array
// at a time. Past s.exportMax bytes it stops writing but goes on counting,
// for the refusal.
func (s *Server) exportJSON(ctx context.Context, tenantID string, a store.Account) ([]byte, error) {
	p, err := s.store.Progression(ctx, tenantID, a.ID)
	if err != nil {
		return nil, s.internal(ctx, "export", err)
	}
	// The failed sign-ins kept for the account's email (keyed by the
	// email, not the account: one row, read by its key).
	var throttle *exportSignInThrottle
	if a.Email != "" {
		th, err := s.store.LoginThrottle(ctx, tenantID, emailThrottleKey(a.Email))
		if err != nil {
			return nil, s.internal(ctx, "export", err)
		}
		if th != (store.LoginThrottle{}) {
			throttle = &exportSignInThrottle{th.Failures, th.LastFailure, th.LockedUntil}
		}
	}
	var b bytes.Buffer
	put := func(v any, prefix string) error {
		out, err := json.MarshalIndent(v, prefix, "  ")
		if err != nil {
			return err
		}
		b.Write(out)
		return nil
	}
	// element writes the n-th element (1-based) of an array, unless the
	// export is too big already.
	element := func(n int, v any) error {
		if b.Len() > s.exportMax {
			return nil
		}
		if n == 1 {
			b.WriteString("[\n    ")
		} else {
			b.WriteString(",\n    ")
		}
		return put(v, "    ")
	}
	endArray := func(n int) {
		if n == 0 {
			b.WriteString("null") // what MarshalIndent writes of a nil slice
		} else {
			b.WriteString("\n  ]")
		}
	}
	key := func(k string) { b.WriteString(",\n  \"" + k + "\": ") }
	// array writes key's array from a store's streamed read: each calls
	// add with every element; it returns how many there were.
	array := func(k string, each func(add func(any) error) error) (int, error) {
		key(k)
		n := 0
		if err := each(func(v any) error { n++; return element(n, v) }); err != nil {
			return n, err
		}
		endArray(n)
		return n, nil
	}
	// The keys in name order, as MarshalIndent writes a map's.
	var changesN, boardsN, ledgerN, rostersN, matchesN, ratingsN, sessionsN, unfinishedN int
	b.WriteString("{\n  \"account\": ")
	err = put(map[string]any{"id": a.ID, "display_name": a.DisplayName, "device_id": a.DeviceID, "email": a.Email,
		"custom_id": a.CustomID, "has_password": a.PasswordHash != "", "created_at": a.CreatedAt, "updated_at": a.UpdatedAt}, "  ")
	if err == nil {
		changesN, err = array("applied_changes", func(add func(any) error) error {
			return s.store.EachAppliedChange(ctx, tenantID, a.ID, func(c store.AppliedChange) error {
				return add(exportAppliedChange{c.Key, c.At})
			})
		})
	}
	if err == nil {
		boardsN, err = array("leaderboards", func(add func(any) error) error {
			return s.store.EachAccountBoard(ctx, tenantID, a.ID, func(e store.AccountBoard) error {
				return add(exportBoard{e.Board, e.Best, e.Sum, e.Matches})
			})
		})
	}
	if err == nil {
		ledgerN, err = array("ledger", func(add func(any) error) error {
			return s.store.EachLedgerEntry(ctx, tenantID, a.ID, func(e store.LedgerEntry) error { return add(e) })
		})
	}
	if err == nil {
		rostersN, err = array("match_rosters", func(add func(any) error) error {
			return s.store.EachAccountRosterEntry(ctx, tenantID, a.ID, func(e store.RosterEntry) error {
				return add(exportRosterEntry{e.MatchID, e.AddedAt})
			})
		})
	}
	if err == nil {
		matchesN, err = array("matches", func(add func(any) error) error {
			return s.store.EachAccountMatch(ctx, tenantID, a.ID, func(m store.AccountMatch) error {
				return add(exportMatch{m.MatchID, m.Game, m.EndedAt.Format("2006-01-02T15:04:05.000000Z"), m.Player})
			})
		})
	}
	if err == nil {
		key("progression")
		err = put(p, "  ")
	}
	if err == nil {
		ratingsN, err = array("ratings", func(add func(any) error) error {
			return s.store.EachAccountRating(ctx, tenantID, a.ID, func(r store.Rating) error {
				return add(exportRating{r.Mode, r.Rating, r.RD, r.Volatility, r.Matches, r.UpdatedAt})
			})
		})
	}
	if err == nil {
		sessionsN, err = array("sessions", func(add func(any) error) error {
			return s.store.EachAccountSession(ctx, tenantID, a.ID, func(x store.AccountSession) error {
				return add(exportSession{x.FirstTokenAt, x.LastTokenAt, x.ExpiresAt, x.Revoked})
			})
		})
	}
	if err == nil {
		key("sign_in_throttle")
		err = put(throttle, "  ")
	}
	if err == nil {
		unfinishedN, err = array("unfinished_matches", func(add func(any) error) error {
			return s.store.EachUnfinishedAccountMatch(ctx, tenantID, a.ID, func(m store.AccountMatch) error {
				return add(exportUnfinishedMatch{m.MatchID, m.Game, m.CreatedAt, m.Player})
			})
		})
	}
	if err == nil {
		b.WriteString("\n}")
	}
	if err != nil {
		return nil, s.internal(ctx, "export", err)
	}
	if b.Len() > s.exportMax {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
			"the export of account %s would be larger than %s, the most one answer carries (it has %d ledger entries, %d match results, %d unfinished matches, %d match rosters, %d applied changes, %d leaderboard entries, %d ratings and %d sessions); nothing was cut: ask the operator of this Ludus to export it from the database (docs/OPERATIONS.md, \"Exporting a large account\")",
			a.ID, byteSize(s.exportMax), ledgerN, matchesN, unfinishedN, rostersN, changesN, boardsN, ratingsN, sessionsN))
	}
	return b.Bytes(), nil
}

// byteSize writes n bytes for people: "64 MiB", or "1000 bytes".
func byteSize(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
