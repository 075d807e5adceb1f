package protocol

// Claims (docs/protocol.md, "Claims"): workers hand a workflow over with workflow/claim,
// workflow/renew and workflow/release; writes carry the claim's fencingToken.

// Method names of claims (binding).
const (
	MethodClaim   = "workflow/claim"
	MethodRenew   = "workflow/renew"
	MethodRelease = "workflow/release"
)

// ClaimParams are workflow/claim's params.
type ClaimParams struct {
	WorkflowID   string `json:"workflowId"`
	Owner        string `json:"owner"`
	LeaseSeconds *int64 `json:"leaseSeconds"`
}

// RenewParams are workflow/renew's params.
type RenewParams struct {
	WorkflowID   string `json:"workflowId"`
	FencingToken *int64 `json:"fencingToken"`
	LeaseSeconds *int64 `json:"leaseSeconds"`
}

// ReleaseParams are workflow/release's params.
type ReleaseParams struct {
	WorkflowID   string `json:"workflowId"`
	FencingToken *int64 `json:"fencingToken"`
}

// ClaimResult answers workflow/claim and workflow/renew.
type ClaimResult struct {
	WorkflowID   string `json:"workflowId"`
	Owner        string `json:"owner"`
	ExpiresAt    string `json:"expiresAt"` // the database's clock
	FencingToken int64  `json:"fencingToken"`
}

// ReleaseResult answers workflow/release.
type ReleaseResult struct {
	WorkflowID   string `json:"workflowId"`
	FencingToken int64  `json:"fencingToken"`
	// Released is false when the claim was released already (under the same token).
	Released bool `json:"released"`
}

// ClaimedData is the data of a -32008 claimed error: the workflow's claim as the refusal saw
// it. Owner and ExpiresAt are null when nobody holds it (released, or never claimed).
type ClaimedData struct {
	WorkflowID string  `json:"workflowId"`
	Owner      *string `json:"owner"`
	ExpiresAt  *string `json:"expiresAt"`
	Reason     string  `json:"reason"`
}
