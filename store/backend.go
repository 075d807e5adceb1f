package store

import (
	"context"
	"encoding/json"
	"iter"
	"time"
)

// The storage contract: what ckptd asks of a database, in small roles. A backend (store/sqlite;
// PostgreSQL next) implements Backend; callers take the role they need. Every method is safe
// for concurrent use. Errors are ErrNotFound, ErrConflict, ErrTooLarge (*TooLargeError),
// ErrUnavailable (the storage itself is failing; *UnavailableError when the backend stopped
// writing, see Condition), ErrClosed, *InvalidError and *CorruptError,
// wrapped with context; callers test them with errors.Is / errors.As.

// Checkpoints stores, reads and removes checkpoints (checkpoint/*).
type Checkpoints interface {
	// Save stores a checkpoint and returns once it is committed.
	Save(ctx context.Context, req SaveRequest) (SaveResult, error)
	// Enqueue accepts a save without blocking; saves commit in Enqueue order.
	Enqueue(req SaveRequest) *Pending
	// Load returns a verified checkpoint: ErrNotFound, or a *CorruptError if it fails verification.
	Load(ctx context.Context, checkpointID string) (Checkpoint, error)
	// LoadLatest returns the newest intact checkpoint of (workflowID, namespace), naming newer
	// corrupt ones in RecoveredFrom; if every one is corrupt, the newest's *CorruptError.
	LoadLatest(ctx context.Context, workflowID, namespace string) (LoadResult, error)
	// List returns summaries newest first (by seq within a workflow, by save order across).
	List(ctx context.Context, f ListFilter) ([]Summary, error)
	// Summaries returns the stored (unverified) summaries of those of ids that exist, by id.
	Summaries(ctx context.Context, ids []string) (map[string]Summary, error)
	// StateBase returns the state of a checkpoint as the base of a wire delta (checkpoint/save
	// stateDelta): from the backend's StateCache when it holds it, else loaded and verified.
	// ErrNotFound if the checkpoint does not exist (missing or pruned), a *CorruptError if its
	// state fails verification; the empty base for a checkpoint without state.
	StateBase(ctx context.Context, checkpointID string) (DeltaBase, error)
	// Inspect reads a checkpoint like Load but reports a failed verification in Corrupt.
	Inspect(ctx context.Context, checkpointID string) (Inspection, error)
	// Delete removes one checkpoint with its pending writes; 0 if it does not exist.
	Delete(ctx context.Context, checkpointID string) (int, error)
	// Prune deletes old checkpoints per (workflow, namespace) (SelectExpired, PruneRequest.Retention),
	// in bites (store/bites.go: GroupBounds read again in every bite); results are summed.
	Prune(ctx context.Context, req PruneRequest) (PruneResult, error)
	// SetOnPruned registers a callback for checkpoints removed by "retention", "prune", "idle"
	// or "complete"; it runs after the commit and must not block or call the backend.
	SetOnPruned(f func(workflowID string, ids []string, reason string))
}

// Workflows keeps a workflow's own row: retention, completion, configured sources.
type Workflows interface {
	// ListWorkflows summarises one page of workflows (WorkflowFilter, store/pages.go), from the
	// per-workflow figures kept in every write's transaction (count, stored bytes, latest) and
	// through an index of the listing's order: a page costs what it returns, not what is
	// stored. AllWorkflows pages through every one.
	ListWorkflows(ctx context.Context, f WorkflowFilter) (WorkflowPage, error)
	// Workflow summarises one workflow; ErrNotFound if it is unknown.
	Workflow(ctx context.Context, workflowID string) (WorkflowInfo, error)
	// Configure sets a workflow's retention (r nil: only reads the effective one).
	Configure(ctx context.Context, workflowID string, r *Retention) (Retention, error)
	// DefaultRetention is the retention of workflows without their own.
	DefaultRetention() Retention
	// IsCompleted reports whether a workflow was completed and not saved to since.
	IsCompleted(ctx context.Context, workflowID string) (bool, error)
	// Complete marks a workflow completed; without preserve the checkpoints it had then are
	// deleted, in bites after the one that marks it.
	Complete(ctx context.Context, workflowID string, preserve bool) (int, error)
	// DeleteWorkflow removes a workflow's checkpoints (oldest first, in bites) and then its row;
	// 0 if unknown.
	DeleteWorkflow(ctx context.Context, workflowID string) (int, error)
	// ExpireIdle deletes the workflows whose idle TTL has passed, in bites that check again that
	// each is still idle: workflowId -> checkpoint ids.
	ExpireIdle(ctx context.Context) (map[string][]string, error)
	// WorkflowSources returns the sources spec configured for a workflow, or nil.
	WorkflowSources(ctx context.Context, workflowID string) (json.RawMessage, error)
	// SetWorkflowSources stores (nil: removes) a workflow's sources spec, creating the workflow.
	SetWorkflowSources(ctx context.Context, workflowID string, spec json.RawMessage) error
}

// Writes stores pending writes against checkpoints.
type Writes interface {
	// PutWrites stores writes of tasks against checkpointID (which must exist in workflowID):
	// idx >= 0 once (a repeat is ignored), idx < 0 replaced. It returns the rows stored.
	PutWrites(ctx context.Context, workflowID, namespace, checkpointID string, writes []Write) (int, error)
}

// LangGraph stores LangGraph checkpoints, channel values and pending writes (lg/*, thread/*).
type LangGraph interface {
	// LGPut queues a checkpoint with its new blobs; blobsStored is valid after Wait.
	LGPut(req LGPutRequest) (pending *LGPending, blobsStored *int)
	// LGPutWrites queues pending writes of one task; stored is valid after Wait.
	LGPutWrites(thread, ns, checkpointID string, writes []LGWrite) (pending *LGPending, stored *int)
	// LGGet returns one checkpoint (checkpointID, or the latest) with its blobs and writes; nil if none.
	LGGet(ctx context.Context, thread, ns, checkpointID string) (*LGTuple, error)
	// LGList returns one page of checkpoints, id descending, with blobs and writes.
	LGList(ctx context.Context, f LGListFilter) (LGListResult, error)
	// LGChannelHistory answers lg/channelHistory (ChannelHistory over one snapshot).
	LGChannelHistory(ctx context.Context, thread, ns, checkpointID string, channels []string) (LGHistoryResult, error)
	// LGDeleteThread deletes a thread's rows, in bites; it returns the checkpoints deleted.
	LGDeleteThread(ctx context.Context, thread string) (int, error)
	// LGCopyThread copies a thread's rows to another thread id; it returns the checkpoints copied.
	LGCopyThread(ctx context.Context, src, dst string) (int, error)
	// LGPrune prunes threads ("delete", or "keep_latest": SelectKeepLatest per namespace), in bites.
	LGPrune(ctx context.Context, threads []string, strategy string) (int, error)
	// LGDeleteForRuns deletes the checkpoints whose metadata.run_id is one of runIDs.
	LGDeleteForRuns(ctx context.Context, runIDs []string) (int, error)
	// LGThreads lists every thread, most recently updated first.
	LGThreads(ctx context.Context) ([]LGThread, error)
	// ListLGThreads lists one page of at most limit threads (LGThreadList), most recently
	// updated first, after cursor ("" : from the newest), through the kept list of threads: a
	// page costs its threads' rows, not every LangGraph row.
	ListLGThreads(ctx context.Context, limit int, cursor string) (LGThreadList, error)
	// LGThreadCheckpoints lists a thread's checkpoints (namespace by namespace, newest first).
	LGThreadCheckpoints(ctx context.Context, thread string, namespace *string, limit int) ([]LGCheckpointInfo, error)
	// LGStageValue stores one value of thread ahead of the put or putWrites that names it
	// (LGBlob.Staged, LGWrite.Staged, LGPutRequest.CheckpointStaged) and returns its id. A
	// value no put takes is collected after LGStagedTTL (and when the store closes).
	LGStageValue(ctx context.Context, thread, typ string, data []byte) (int64, error)
	// LGConfigure sets (r) or removes (inherit) the own retention of thread, or with a nil
	// thread the database's; it returns the effective retention (store/lgretention.go).
	LGConfigure(ctx context.Context, thread *string, r *Retention, inherit bool) (LGRetentionInfo, error)
	// LGExpireIdle deletes, in bites, the threads past their idle TTL and stale staged values.
	LGExpireIdle(ctx context.Context) (LGSweepResult, error)
	// LGIdleThreads lists the threads whose last put is older than before, oldest first (limit
	// 0: all).
	LGIdleThreads(ctx context.Context, before time.Time, limit int) ([]LGIdleThread, error)
}

// Claims hands workflows over between workers (store/claims.go): a claim with a lease and a
// fencing token per workflow id (a LangGraph thread id is claimed the same way). The backend
// keeps one row per id claimed, never deleted, and decides with DecideClaim, DecideRenew,
// DecideRelease and CheckFence inside the transaction that changes the row or makes the write,
// against the database's clock (never the caller's). Every write of a workflow or thread is
// checked: Save and LGPut with their request's FencingToken, PutWrites, LGPutWrites and
// Complete with no token (they are the *Fenced methods with token 0). Refusals are
// *ClaimedError (errors.Is ErrClaimed), and a refused write stores nothing.
type Claims interface {
	// Claim claims workflowID for owner for lease (DecideClaim).
	Claim(ctx context.Context, workflowID, owner string, lease time.Duration) (Claim, error)
	// Renew extends the lease of the holder of token (DecideRenew).
	Renew(ctx context.Context, workflowID string, token int64, lease time.Duration) (Claim, error)
	// Release frees the claim of the holder of token (DecideRelease); false if it was free already.
	Release(ctx context.Context, workflowID string, token int64) (bool, error)
	// ClaimOf returns workflowID's claim (Token 0: never claimed) and the database's clock as it
	// read it.
	ClaimOf(ctx context.Context, workflowID string) (Claim, time.Time, error)
	// Claimable summarises the resumable workflows (checkpoints, not completed) whose claim is
	// free at the database's clock (Claim.Free), least recently updated first, at most limit
	// (0: all) of them: the work a worker may pick up. Backends walk an index of the resumable
	// workflows in that order and look each claim up by key.
	Claimable(ctx context.Context, limit int) ([]WorkflowInfo, error)
	// PutWritesFenced is PutWrites under fencing token (0: none), checked by CheckFence.
	PutWritesFenced(ctx context.Context, workflowID, namespace, checkpointID string, writes []Write, token int64) (int, error)
	// LGPutWritesFenced is LGPutWrites under fencing token (0: none) for the claim of thread.
	LGPutWritesFenced(thread, ns, checkpointID string, writes []LGWrite, token int64) (pending *LGPending, stored *int)
	// CompleteFenced is Complete under fencing token (0: none).
	CompleteFenced(ctx context.Context, workflowID string, preserve bool, token int64) (int, error)
}

// Manifests reads the source manifests recorded with checkpoints (SaveRequest.Manifest), as
// opaque records (drift decodes them).
type Manifests interface {
	// CheckpointManifestRef describes a checkpoint; ErrNotFound if it does not exist.
	CheckpointManifestRef(ctx context.Context, checkpointID string) (ManifestRef, error)
	// LatestManifestRef describes the latest checkpoint of (workflowID, namespace), with or
	// without a manifest; ErrNotFound if there is none.
	LatestManifestRef(ctx context.Context, workflowID, namespace string) (ManifestRef, error)
	// LatestSourcesRef describes the workflow's most recent checkpoint (any namespace) with a
	// manifest recorded for root; ErrNotFound if there is none.
	LatestSourcesRef(ctx context.Context, workflowID, root string) (ManifestRef, error)
	// Manifest returns the manifest recorded with ref's checkpoint, complete; ErrNotFound if
	// none, a *CorruptError if rows are missing.
	Manifest(ctx context.Context, ref ManifestRef) (ManifestRecord, error)
	// ScanManifests reads every stored manifest row from one snapshot (VerifyManifests).
	ScanManifests(ctx context.Context, scan ManifestScan) error
}

// Archive moves workflows and LangGraph threads between databases with their ids, seqs,
// creation times and bytes intact.
type Archive interface {
	// Export reads a workflow from one snapshot: begin gets its record and checkpoint count, each
	// every checkpoint in seq order, verified and complete (manifest included).
	Export(ctx context.Context, workflowID string, begin func(WorkflowRecord, int) error, each func(Checkpoint) error) error
	// Import writes a workflow's checkpoints as Export produced them, in bites
	// (store/importing.go); a failure deletes what earlier bites wrote.
	Import(ctx context.Context, wf WorkflowRecord, cps iter.Seq2[Checkpoint, error], opts ImportOptions) (ImportResult, error)
	// LGExport reads every row of a thread from one snapshot, verified.
	LGExport(ctx context.Context, thread string, begin func(LGThreadCounts) error, each func(LGRecord) error) error
	// LGImport writes a thread's rows as LGExport produced them, in one transaction.
	LGImport(ctx context.Context, thread string, recs iter.Seq2[LGRecord, error], opts ImportOptions) (LGImportResult, error)
}

// Maintenance reports on the database and checks it.
type Maintenance interface {
	// About names the backend.
	About() About
	// Stats counts the checkpoint family.
	Stats(ctx context.Context) (DBStats, error)
	// Usage adds up checkpoint sizes and counts workflows by state.
	Usage(ctx context.Context) (Usage, error)
	// Footprints reports the logical and stored bytes (Footprint) of the database and of the
	// workflows and LangGraph threads req names, from one snapshot.
	Footprints(ctx context.Context, req FootprintRequest) (FootprintReport, error)
	// Health reports the backend's own figures and settings.
	Health(ctx context.Context) (Health, error)
	// Condition reports whether the backend still accepts writes, and if not why (the database
	// is damaged, its file was removed or replaced, the disk was full at open). It never blocks.
	Condition() Condition
	// Verify re-checks every stored state (decoding and SHA-256): one CorruptError per corrupt
	// checkpoint, one with an empty CheckpointID per database-level problem. progress, if not
	// nil, is called with the number of states checked.
	Verify(ctx context.Context, progress func(done, total int)) ([]CorruptError, error)
	// IntegrityCheck runs the database's own consistency check (About.Integrity): its problems.
	IntegrityCheck(ctx context.Context) ([]string, error)
	// CheckFigures recounts the kept figures (each workflow's count, stored bytes and newest
	// seq; the database's counters) from the rows they count: one line per figure that
	// differs. It reads everything, like Verify.
	CheckFigures(ctx context.Context) ([]string, error)
	// VerifyLG re-checks every stored LangGraph byte string.
	VerifyLG(ctx context.Context) (LGCounts, []LGProblem, error)
	// Compact compresses every state still waiting for deferred compression now.
	Compact(ctx context.Context) error
	// CompactionStats reports this process's deferred compression.
	CompactionStats() CompactionStats
	// BlobCacheStats reports this process's cache of LangGraph channel values.
	BlobCacheStats() BlobCacheStats
	// ChunkCacheStats reports this process's cache of verified chunks (ChunkCache).
	ChunkCacheStats() ChunkCacheStats
}

// Saga keeps validation checkpoints' rows and the compensation log (store/sagatypes.go): the
// workflow's rules, the validated checkpoints a rollback recommendation chooses among,
// compensations and rollbacks. The rules that give them meaning are package saga's. Checkpoint
// retention never deletes a compensation and keeps the checkpoints a rollback goes back to (the
// newest whose validation did not fail, the target of an unfinished rollback); idle expiry skips
// a workflow with a compensation not done or an unfinished rollback; deleting a workflow (or
// completing it without preserve) deletes its compensations and rollbacks.
type Saga interface {
	// SagaConfig returns a workflow's stored validation and compensation config (zero if none).
	SagaConfig(ctx context.Context, workflowID string) (SagaConfig, error)
	// SetSagaConfig stores the members of cfg that are set, creating the workflow.
	SetSagaConfig(ctx context.Context, workflowID string, cfg SagaConfig) error
	// ValidationHistory returns up to limit checkpoints of (workflowID, namespace) saved with a
	// validation and older than beforeSeq (0: any), newest first.
	ValidationHistory(ctx context.Context, workflowID, namespace string, beforeSeq int64, limit int) ([]ValidationRef, error)
	// RegisterCompensation stores a compensation, durably once it returns, creating the workflow;
	// Seq follows the workflow's previous one, AfterSeq is its newest checkpoint seq.
	RegisterCompensation(ctx context.Context, req CompensationRequest) (Compensation, error)
	// OpenCompensationForStep reports whether a compensation not yet done was registered for
	// step in (workflowID, namespace) since the step's newest completed checkpoint.
	OpenCompensationForStep(ctx context.Context, workflowID, namespace, step string) (bool, error)
	// Compensations returns the compensations of (workflowID, namespace) with AfterSeq >= toSeq
	// and Seq <= maxSeq (0: any), in registration order.
	Compensations(ctx context.Context, workflowID, namespace string, toSeq, maxSeq int64) ([]Compensation, error)
	// Compensation returns one compensation; ErrNotFound if it does not exist.
	Compensation(ctx context.Context, compensationID string) (Compensation, error)
	// Rollback returns one rollback; ErrNotFound if it does not exist.
	Rollback(ctx context.Context, rollbackID string) (Rollback, error)
	// LatestRollback returns the newest rollback of (workflowID, namespace), or nil; an
	// unfinished one is always the newest.
	LatestRollback(ctx context.Context, workflowID, namespace string) (*Rollback, error)
	// BeginRollback starts a rollback to (toCheckpointID, toSeq) ("", 0: full) covering the
	// compensations registered so far, or returns the unfinished one with began false.
	BeginRollback(ctx context.Context, workflowID, namespace, toCheckpointID string, toSeq int64) (r Rollback, began bool, err error)
	// MarkCompensation records a rollback's outcome for one compensation (CompensationDone or
	// CompensationFailed; done stays done). ErrNotFound, ErrConflict (the rollback is complete).
	MarkCompensation(ctx context.Context, compensationID, rollbackID, status, errMsg string) (Compensation, error)
	// CompleteRollback ends a rollback; with prune it deletes the rolled-back checkpoints (and
	// the compensations it did) and returns their ids. Again: no change. ErrNotFound.
	CompleteRollback(ctx context.Context, rollbackID string, prune bool) (Rollback, []string, error)
}

// Backend is a whole storage backend.
type Backend interface {
	Checkpoints
	Workflows
	Writes
	LangGraph
	Claims
	Manifests
	Archive
	Maintenance
	Saga
	// Close stops accepting work, commits everything already accepted and closes the database.
	Close() error
}
