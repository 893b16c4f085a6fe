package taskendpoint

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/task"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// CredentialsTasks finds the task that holds a credentials ID; *engine.Engine is the agent's. It
// must be safe for concurrent use and return copies.
type CredentialsTasks interface {
	// ByCredentialsID returns the task the agent knows (restored from its saved state or added
	// since, and not yet removed) whose task role or execution role credentials ID is id.
	ByCredentialsID(id string) (*task.Task, bool)
}

// The error codes of the credentials endpoints, as the ECS agent names them.
const (
	codeNoID            = "NoIdInRequest"
	codeInvalidID       = "InvalidIdInRequest"
	codeUninitialized   = "CredentialsUninitialized"
	codeInternalError   = "InternalServerError"
	messageInternalFail = "Internal server error" // the ECS agent's, without the version prefix
)

// credentialsBody is a 200 answer of the credentials endpoints. Expiration is RFC 3339 in UTC, to
// the second, and is left out when the credentials have none.
type credentialsBody struct {
	RoleArn         string `json:"RoleArn"`
	AccessKeyID     string `json:"AccessKeyId"`
	SecretAccessKey string `json:"SecretAccessKey"`
	Token           string `json:"Token"`
	Expiration      string `json:"Expiration,omitempty"`
}

// credentialsError is an error answer of the credentials endpoints.
type credentialsError struct {
	Code          string `json:"code"`
	Message       string `json:"message"`
	HTTPErrorCode int    `json:"HTTPErrorCode"`
}

// serveCredentials answers /v1/credentials?id= (version 1) and /v2/credentials/ID (version 2) as the
// ECS agent does: 400 NoIdInRequest without an ID, 503 CredentialsUninitialized for an ID a known
// task holds whose credentials have not arrived (or, in local mode, are being assumed), 400
// InvalidIdInRequest for any other ID without credentials, 500 InternalServerError when they cannot
// be had.
//
// holder is the task that holds id (nil: none does), bind what binding says of this request: a caller
// bindRefuse names is answered 400 InvalidIdInRequest before anything is looked up, whatever the ID,
// so that it learns nothing of it.
func (h *Handler) serveCredentials(w http.ResponseWriter, r *http.Request, version int, id string, holder *task.Task, bind binding) {
	prefix := fmt.Sprintf("CredentialsV%dRequest: ", version)
	fail := func(status int, code, msg string) {
		writeJSON(w, status, credentialsError{Code: code, Message: msg, HTTPErrorCode: status})
	}
	if id == "" {
		h.log.Debug("task credentials request without an ID", "api_version", version)
		fail(http.StatusBadRequest, codeNoID, prefix+"No Credential ID in the request")
		return
	}
	short := taskcreds.ShortID(id)
	switch bind {
	case bindRefuse:
		src, _ := sourceAddr(r)
		if holder == nil {
			h.log.Debug("task credentials not found", "credentials_id", short, "api_version", version)
		} else {
			h.refused.Note(refusedStranger, "credentials_id", short, "task_arn", holder.Arn, "source", src.String())
			h.log.Debug("task credentials asked from an address that is not the task's", "credentials_id", short, "task_arn", holder.Arn,
				"source", src.String(), "api_version", version)
		}
		fail(http.StatusBadRequest, codeInvalidID, prefix+"Credentials not found")
		return
	case bindNotYet:
		h.log.Debug("task credentials asked while the task's container address is not known yet", "credentials_id", short, "task_arn", holder.Arn, "api_version", version)
		fail(http.StatusServiceUnavailable, codeUninitialized, prefix+"Credentials uninitialized for ID")
		return
	}
	c, err := h.lookupCredentials(r.Context(), id)
	host := h.logCreds != nil && h.fromHost(r)
	if errdefs.IsNotFound(err) && host {
		c, err = h.logCreds.TaskCredentials(r.Context(), id)
	}
	if err == nil && stoppedTaskRole(holder, id) {
		err = fmt.Errorf("credentials %s: %w: the task stopped", short, errdefs.ErrNotFound)
	}
	switch {
	case errdefs.IsNotFound(err) && pending(holder, id):
		h.log.Debug("task credentials not received yet", "credentials_id", short, "task_arn", holder.Arn, "api_version", version)
		fail(http.StatusServiceUnavailable, codeUninitialized, prefix+"Credentials uninitialized for ID")
		return
	case errdefs.IsNotFound(err):
		h.log.Debug("task credentials not found", "credentials_id", short, "api_version", version)
		fail(http.StatusBadRequest, codeInvalidID, prefix+"Credentials not found")
		return
	case errdefs.IsUnavailable(err):
		h.log.Debug("task credentials unavailable", "credentials_id", short, "api_version", version, "error", err)
		fail(http.StatusServiceUnavailable, codeUninitialized, prefix+"Credentials uninitialized for ID")
		return
	case err != nil:
		// Debug: the source logs the cause once per task and role; a WARN per request would let any
		// local process flood the log.
		h.log.Debug("task credentials cannot be had", "credentials_id", short, "api_version", version, "error", err)
		fail(http.StatusInternalServerError, codeInternalError, messageInternalFail)
		return
	}
	body := credentialsBody{RoleArn: c.RoleArn, AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, Token: c.SessionToken}
	if !c.Expiration.IsZero() {
		body.Expiration = c.Expiration.UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	h.log.Debug("task credentials served", "credentials_id", short, "role_arn", c.RoleArn, "api_version", version)
	writeJSON(w, http.StatusOK, body)
}

// holder returns the task that holds the credentials ID, if the handler was given CredentialsTasks.
func (h *Handler) holder(id string) (*task.Task, bool) {
	if h.holders == nil || id == "" {
		return nil, false
	}
	return h.holders.ByCredentialsID(id)
}

// stoppedTaskRole reports whether id is the task role credentials ID of a task that has stopped:
// the ECS agent stops serving a task role's credentials once its task is STOPPED (its execution
// role's are kept until the task is removed, for the log driver's last writes).
func stoppedTaskRole(t *task.Task, id string) bool {
	return t != nil && t.CredentialsID == id && t.KnownStatus == task.TaskStopped
}

// pending reports whether the task role credentials with this ID are due from the control plane: a
// task the agent knows holds the ID for its task role and has not stopped. (The execution role's,
// which only the host's log driver is served, are due when the log driver source says so.)
func pending(t *task.Task, id string) bool {
	return t != nil && t.CredentialsID == id && t.KnownStatus != task.TaskStopped
}

// fromHost reports whether r comes from one of the host's own addresses, as the Docker daemon's
// requests do.
func (h *Handler) fromHost(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && h.isHost(ap.Addr().Unmap())
}

// hostAddress reports whether ip is loopback or assigned to one of the host's interfaces.
func hostAddress(ip netip.Addr) bool {
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if addr, ok := netip.AddrFromSlice(n.IP); ok && addr.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// lookupCredentials asks the source, treating a missing source as one that knows no credentials.
func (h *Handler) lookupCredentials(ctx context.Context, id string) (taskcreds.Credentials, error) {
	if h.creds == nil {
		return taskcreds.Credentials{}, fmt.Errorf("credentials %s: %w", taskcreds.ShortID(id), errdefs.ErrNotFound)
	}
	return h.creds.TaskCredentials(ctx, id)
}
