package simnode

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"ludus.dev/ludus/clusterstate"
)

// Domain errors of a sim node. Node methods return these, or clusterstate's
// sentinel errors, wrapped with a message that says what to do (see
// nodeErrorf); connectError, the one place where they become Connect codes, is
// applied at the service edge.
var (
	errGameFull    = errors.New("the game is full")
	errNotJoined   = errors.New("join the game before sending input or streaming its frames")
	errGameOver    = errors.New("the game is over")
	errGameStopped = errors.New("the game stopped on this node")
	// errNotMatched refuses a join of a matched game by an account the
	// matchmaker did not match into it (GameSpec.Reserved).
	errNotMatched = errors.New("only the players matched into this game may join it")

	errDraining       = errors.New("node draining")
	errFenced         = errors.New("node lost its lease")
	errNodeFull       = errors.New("node full")
	errBadConfig      = errors.New("configuration refused")
	errModuleUnusable = errors.New("module unusable")
	errModuleMismatch = errors.New("module bytes do not match their build id")
	errClusterState   = errors.New("cluster state unreachable")
	errNotHere        = errors.New("game not on this node")
	errResuming       = errors.New("game resuming")
	errNoSuchGame     = errors.New("no such game")
	errNoSuchNode     = errors.New("no such node")
	errSameNode       = errors.New("same node")
	errNoRoom         = errors.New("no room")
)

// nodeError is a domain error with the message a caller sees.
type nodeError struct {
	kind error
	msg  string
}

func (e *nodeError) Error() string { return e.msg }
func (e *nodeError) Unwrap() error { return e.kind }

// nodeErrorf returns an error of kind with a formatted message.
func nodeErrorf(kind error, format string, args ...any) error {
	return &nodeError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// connectError maps a node error to its Connect code; messages are kept
// (they say what to do). Errors that are already Connect errors pass through.
func connectError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code := connect.CodeInternal
	switch {
	case errors.Is(err, errGameFull), errors.Is(err, errNodeFull), errors.Is(err, errInputBudget):
		code = connect.CodeResourceExhausted
	case errors.Is(err, errNotMatched):
		code = connect.CodePermissionDenied
	case errors.Is(err, errNotJoined), errors.Is(err, errGameOver), errors.Is(err, errModuleUnusable),
		errors.Is(err, errNoRenderer), errors.Is(err, errNoRoom):
		code = connect.CodeFailedPrecondition
	case errors.Is(err, errGameStopped), errors.Is(err, errDraining), errors.Is(err, errFenced), errors.Is(err, errLogBusy),
		errors.Is(err, errClusterState), errors.Is(err, errResuming),
		errors.Is(err, clusterstate.ErrClaimLost), errors.Is(err, clusterstate.ErrClaimed),
		errors.Is(err, clusterstate.ErrNoOwner), errors.Is(err, clusterstate.ErrSessionFenced):
		code = connect.CodeUnavailable
	case errors.Is(err, errInputGap):
		return inputGapDetail(err)
	case errors.Is(err, errReplaced):
		code = connect.CodeAborted
	case errors.Is(err, errBadConfig), errors.Is(err, errSameNode):
		code = connect.CodeInvalidArgument
	case errors.Is(err, clusterstate.ErrGameExists):
		code = connect.CodeAlreadyExists
	case errors.Is(err, errModuleMismatch):
		code = connect.CodeDataLoss
	case errors.Is(err, errNotHere), errors.Is(err, errNoSuchGame), errors.Is(err, errNoSuchNode),
		errors.Is(err, clusterstate.ErrGameNotFound), errors.Is(err, clusterstate.ErrNodeNotFound):
		code = connect.CodeNotFound
	case errors.Is(err, context.Canceled):
		code = connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		code = connect.CodeDeadlineExceeded
	}
	return connect.NewError(code, err)
}
