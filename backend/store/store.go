// Package store defines the persistence interface of the backend and its
// records. Implementations (store/sqlite today, PostgreSQL later) must pass the
// shared suite in store/storetest.
//
// The store is deliberately dumb: callers generate ids, validate input and hash
// secrets; the store keeps records verbatim (parameterized queries only) and
// enforces uniqueness. Times are kept with microsecond precision, in UTC.
package store

import (
	"context"
	"errors"
	"time"
)

// Errors every implementation returns (wrapped) for the matching conditions.
var (
	// ErrNotFound: no such record, or a referenced record (e.g. the tenant of
	// a new account) does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrAlreadyExists: a unique key (tenant slug, account device, key hash,
	// id) is taken.
	ErrAlreadyExists = errors.New("store: already exists")
)

// Tenant is a studio.
type Tenant struct {
	ID        string
	Slug      string
	Name      string
	CreatedAt time.Time
}

// APIKey is an API key of a tenant. Only a hash of the key is stored.
type APIKey struct {
	ID       string
	TenantID string
	// Hash is the SHA-256 of the key (32 bytes), unique across tenants.
	Hash []byte
	// Scope says what the key may do, e.g. "admin".
	Scope     string
	CreatedAt time.Time
}

// Account is a player account of a tenant.
type Account struct {
	ID       string
	TenantID string
	// DeviceID binds a guest account to a device; unique per tenant. Empty
	// for accounts signed in otherwise (reserved for email/password).
	DeviceID    string
	DisplayName string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// Module is a game module build stored under a name. The same bytes (build id)
// may be stored under several names; a name has a history of builds, the
// newest put last.
type Module struct {
	TenantID string
	Name     string
	// BuildID is the lowercase hex SHA-256 of the module's bytes.
	BuildID      string
	ABIVersion   int
	MetaName     string // name the module declares in ludus_meta
	TickRate     int
	MaxPlayers   int
	FrameDivisor int
	ViewFormat   string
	ViewWidth    int
	ViewHeight   int
	SizeBytes    int64
	// CreatedAt is the first upload of this build under this name.
	CreatedAt time.Time
	// UploadedAt is the latest upload of this build under this name.
	UploadedAt time.Time
}

// SigningKey is a ticket signing key (see package auth).
type SigningKey struct {
	ID string
	// Private is the private key as written by auth.MarshalPrivate.
	Private   []byte
	CreatedAt time.Time
	// RetiredAt is zero while the key is current.
	RetiredAt time.Time
}

// Store is the backend's persistence. Implementations are safe for concurrent use.
type Store interface {
	// CreateTenant creates a tenant together with its first API keys, atomically.
	// ErrAlreadyExists if the slug or id is taken.
	CreateTenant(ctx context.Context, t Tenant, keys ...APIKey) error
	TenantByID(ctx context.Context, id string) (Tenant, error)
	TenantBySlug(ctx context.Context, slug string) (Tenant, error)
	// ListTenants returns all tenants, oldest first (ties by slug).
	ListTenants(ctx context.Context) ([]Tenant, error)

	// CreateAPIKey stores a key. ErrNotFound if the tenant does not exist.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// APIKeyByHash finds a key by the hash of its secret.
	APIKeyByHash(ctx context.Context, hash []byte) (APIKey, error)

	// CreateAccount stores a new account. ErrAlreadyExists if the device id
	// is taken in the tenant; ErrNotFound if the tenant does not exist.
	CreateAccount(ctx context.Context, a Account) error
	AccountByID(ctx context.Context, tenantID, accountID string) (Account, error)
	AccountByDevice(ctx context.Context, tenantID, deviceID string) (Account, error)
	// SetDisplayName renames an account.
	SetDisplayName(ctx context.Context, tenantID, accountID, name string, at time.Time) error

	// PutModule stores a build under a name and makes it the newest of that
	// name; m.UploadedAt is the time of this upload (CreatedAt is ignored and
	// set to it on the first put). Putting the same build under the same name
	// again stores no new bytes: it updates UploadedAt and the metadata and
	// makes the build the newest again. SizeBytes is set from wasm. It returns
	// the stored record. ErrNotFound if the tenant does not exist.
	PutModule(ctx context.Context, m Module, wasm []byte) (Module, error)
	// LatestModule returns the newest build put under a name.
	LatestModule(ctx context.Context, tenantID, name string) (Module, error)
	// GetModule returns a build of the tenant with its bytes. A build of
	// another tenant is ErrNotFound.
	GetModule(ctx context.Context, tenantID, buildID string) (Module, []byte, error)
	// ListModules returns the tenant's modules (every build under every
	// name), newest first, without their bytes.
	ListModules(ctx context.Context, tenantID string) ([]Module, error)

	// ListSigningKeys returns every stored signing key.
	ListSigningKeys(ctx context.Context) ([]SigningKey, error)
	// PutSigningKeys inserts or replaces keys (by id), atomically.
	PutSigningKeys(ctx context.Context, keys ...SigningKey) error
	// DeleteSigningKeys deletes keys by id; unknown ids are ignored.
	DeleteSigningKeys(ctx context.Context, ids ...string) error

	// Close releases the store's resources.
	Close() error
}
