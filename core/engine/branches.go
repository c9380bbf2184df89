package engine

import (
	"sync"

	"github.com/sandtrap/sandtrap/core/fsview"
	"github.com/sandtrap/sandtrap/core/policy"
	"github.com/sandtrap/sandtrap/core/protocol"
	runs "github.com/sandtrap/sandtrap/core/run"
)

// The workdir's kept branches: the upper layers of runs whose branch action was
// "keep", held (in memory: each is a tmpfs) until the commit or abort op or
// until the sandbox closes.
var (
	branchMu  sync.Mutex
	branches  = map[*Sandbox]map[uint64]*fsview.Layer{}
	branchSeq uint64
)

// KeepLayer holds l for a later commit or abort (core/run.Keeper); its id.
func (s *Sandbox) KeepLayer(l *fsview.Layer) uint64 {
	branchMu.Lock()
	defer branchMu.Unlock()
	branchSeq++
	m := branches[s]
	if m == nil {
		m = map[uint64]*fsview.Layer{}
		branches[s] = m
		s.OnClose(func() { s.dropBranches() })
	}
	m[branchSeq] = l
	return branchSeq
}

func (s *Sandbox) dropBranches() {
	branchMu.Lock()
	m := branches[s]
	delete(branches, s)
	branchMu.Unlock()
	for _, l := range m {
		l.Release() // a layer on disk (fs_storage) stays there
	}
}

// takeBranch removes the kept branch id of the sandbox (nil: none).
func (s *Sandbox) takeBranch(id uint64) *fsview.Layer {
	branchMu.Lock()
	defer branchMu.Unlock()
	l := branches[s][id]
	delete(branches[s], id)
	return l
}

// CommitResult is the commit op's answer.
type CommitResult struct {
	Committed     []runs.Change       `msgpack:"committed"`
	CommitRefused []runs.Change       `msgpack:"commit_refused"`
	Error         *protocol.ErrorInfo `msgpack:"error"`
}

// Commit applies a kept branch to the workdir (the branch is gone afterwards,
// whether every change applied or not: the result says which did).
func (s *Sandbox) Commit(id uint64) (*CommitResult, error) {
	l := s.takeBranch(id)
	if l == nil {
		return nil, invalidRequest("branch_id", "no kept branch %d in this sandbox (committed, aborted, or never kept)", id)
	}
	cr, err := l.Commit(runs.Writable(s.Policy))
	l.Abort() // the branch is gone: its layer too (on disk: its directory)
	out := &CommitResult{Committed: []runs.Change{}, CommitRefused: []runs.Change{}}
	if cr != nil {
		out.Committed, out.CommitRefused = cr.Applied, cr.Refused
	}
	if err != nil {
		out.Error = &protocol.ErrorInfo{Kind: protocol.KindCommit, Message: err.Error()}
	}
	return out, nil
}

// Abort drops a kept branch.
func (s *Sandbox) Abort(id uint64) error {
	l := s.takeBranch(id)
	if l == nil {
		return invalidRequest("branch_id", "no kept branch %d in this sandbox (committed, aborted, or never kept)", id)
	}
	l.Abort()
	return nil
}

// branchOp serves the dry_run, commit and abort ops.
func (s *Sandbox) branchOp(op string, m map[string]any) ([]byte, string) {
	if op == "dry_run" {
		var probs policy.Problems
		req := parseRun(m, "", "dry_run", &probs)
		if s.Policy.Workdir == "" {
			probs.Add("op", "dry_run needs a sandbox with a workdir (its changes are listed, then discarded)")
		}
		if len(probs) > 0 {
			return ErrorResponse(requestError(probs)), KindInvalidRequest
		}
		req.DryRun = true
		res := s.Run(req)
		return Encode(res), CallKind(res.Error)
	}
	id, ok := policy.AsInt(m["branch_id"])
	if !ok || id <= 0 {
		return ErrorResponse(invalidRequest("branch_id", "want the branch_id of a result whose branch was kept")), KindInvalidRequest
	}
	if op == "abort" {
		if err := s.Abort(uint64(id)); err != nil {
			return ErrorResponse(err), kindOf(err)
		}
		return Encode(map[string]any{}), ""
	}
	res, err := s.Commit(uint64(id))
	if err != nil {
		return ErrorResponse(err), kindOf(err)
	}
	return Encode(res), CallKind(res.Error)
}
