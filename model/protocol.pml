/*
 * The exactly-once commit protocol of this pipeline, as a Promela model checked by SPIN.
 * docs/model-checking.md explains the bounds, what is abstracted away and how each step maps to code.
 *
 * Every shared variable below stands for one DynamoDB item or S3 object; every `atomic` block that touches them
 * is ONE AWS call (a conditional put, an update, a transaction, a strongly consistent read), named by a
 * `code:` comment after the function of shared/ that makes it. test/model/model-mapping.test.ts checks those names
 * still exist in the code.
 *
 * Mutations (model/mutations.txt): each MUT_* macro weakens one guard the code relies on; scripts/model-check.mjs
 * compiles the model once per mutation and requires SPIN to find a counterexample.
 */

/* ── bounds ────────────────────────────────────────────────────────────────────────────────────────────── */
#define NP 2                /* partitions */
#define NO 2                /* records (offsets 0..NO-1) per partition, one record per chunk */
#define NR 4                /* NP*NO records */
#define MAXCID 4            /* checkpoint ids: each committed checkpoint covers >= 1 new offset */
#define MAXATT 4            /* attempts per id: 1 + coordinator faults + lease lapses */
#ifndef PFAULTS
#define PFAULTS 2           /* processor crashes / redeliveries, all instances together */
#endif
#ifndef CFAULTS
#define CFAULTS 2           /* coordinator step failures, both executions together */
#endif
#ifndef LAPSES
#define LAPSES 1            /* checkpoint leases that lapse while their owner still runs */
#endif
#ifndef EXPIRIES
#define EXPIRIES 1          /* idempotency claims that outlive their TTL */
#endif
#ifndef ZOMBIES
#define ZOMBIES 1           /* partitions (from 0) where a second instance runs the same batch (a zombie) */
#endif
#ifndef EXECUTIONS
#define EXECUTIONS 2        /* coordinator executions running alongside the processors */
#endif
/* The final-object layout a prepare plans (finalObjects, shared/config/settings.ts; code: planShard()): merged
   objects by default, as the code's default; PARTITION_OBJECTS: one object per partition range (finalObjects:
   partition, or a re-encoded stream); FINAL_OBJECTS_SWITCH: each run of prepare plans either (a redeploy that
   changes the setting while checkpoints are in flight, or a shard that falls back to per-partition objects). */
#if defined(PARTITION_OBJECTS) && defined(FINAL_OBJECTS_SWITCH)
#error "PARTITION_OBJECTS and FINAL_OBJECTS_SWITCH exclude each other"
#endif
#if !defined(PARTITION_OBJECTS)
#define MERGED_LAYOUT       /* a plan may be merged: its variables and steps are compiled in */
#endif
#if defined(PARTITION_OBJECTS) || defined(FINAL_OBJECTS_SWITCH)
#define PARTITION_LAYOUT    /* a plan may be per partition */
#endif

/* executions: the concurrent ones (0..EXECUTIONS-1), then the fault-free ones after the faults */
#define FIRST_CLEAN (EXECUTIONS > 2 -> EXECUTIONS : 2)
#define NEXEC 12
/* EXPRESS: the scheduled executions (the concurrent ones and the fault-free ones) run on an Express workflow, whose
   begin is told it hands off (definition.ts, workflow: express); a hand-off starts a Standard execution, a fresh
   Execution process with a fresh id from FIRST_STANDARD on. TWIN_EXECUTIONS (implies EXPRESS): execution 0 runs
   twice at once, two processes with the same id (an asynchronous Express execution is at-least-once). */
#if defined(TWIN_EXECUTIONS) && !defined(EXPRESS)
#define EXPRESS
#endif
#ifdef EXPRESS
#define SCHEDULED_EXPRESS true
#else
#define SCHEDULED_EXPRESS false
#endif
#define FIRST_STANDARD (FIRST_CLEAN + CLEAN_RUNS)
#ifdef TWIN_EXECUTIONS
#define TWINS 1
#else
#define TWINS 0
#endif
#define CLEAN_RUNS 4

#define REC(p, o) ((p) * NO + (o))
#define BIT(x) (1 << (x))
/* Offset 0 of BOTH partitions carries the same idempotency key K (a producer duplicate across partitions);
   offset 1 of each partition has no key. */
#define KEYED(o) ((o) == 0)
/* Offsets of a partition's batch above fence f, as a bitmask. */
#define ABOVE(f) ((f) < 0 -> 3 : ((f) == 0 -> 2 : 0))

/* checkpoint statuses (CHECKPOINT_STATUS in shared/ledger/checkpoints.ts); NONE: no item */
#define NONE 0
#define BEGUN 1
#define PREPARED 2
#define COMMITTING 3
#define COMMITTED 4
#define ABORTED 5
#define IN_FLIGHT(s) ((s) == BEGUN || (s) == PREPARED || (s) == COMMITTING)
#define BEFORE_DECISION(s) ((s) == BEGUN || (s) == PREPARED)

/* ── DynamoDB: the staging side ───────────────────────────────────────────────────────────────────────── */
short fence[NP] = -1;       /* the partition's fence item: stagedOffset (-1: no item) */
byte entry[NR];             /* staged-file entry of (p, lastOffset) with its in-progress object: 0 absent, 1 present, 2 deleted */
byte claimant;              /* the claim item of key K: 0 none, else (record + 1) of the claimant */
bool claimExpired;          /* its expiresAt has passed */

/* ── DynamoDB: the checkpoint side ────────────────────────────────────────────────────────────────────── */
byte hId; byte hAtt; byte hStatus = COMMITTED; byte hOwner = 255; byte hCommitted;
bool hAborted;              /* consecutiveAborts > 0: an abort since the last commit (the model needs no count) */
bool hLive;                 /* leaseUntil > now */
byte hLease;                /* the leaseUntil value, as a generation: takeOver is conditioned on it */

/* vote: the shard's vote (votes) with the digest it recorded (planDigests): the attempt whose prepare wrote the
   plan that digest names, 0 for none. A plan holds its (id, attempt), so a digest names one attempt's plan.
   vlay: that plan's layout (W_PARTITION or W_MERGED). Plans are keyed by their digest (planKey()): two runs of one
   shard's prepare in one attempt (twin executions) that plan differently write two plans, and the vote names one;
   within an attempt the covered entries are fixed, so a plan's bytes are fixed by its layout (asserted). */
typedef Record { byte att; byte status; short cut[NP]; short prev[NP]; byte vote; byte vlay
#ifdef LONG_CHECKPOINTS
  ; bool slow               /* committed: it took longer than LONG_CHECKPOINT_MS from begin to commit */
#endif
};
Record rec[MAXCID + 1];     /* rec[0]: the empty cut before the first checkpoint */

/* ── S3: working objects, final objects, manifests ────────────────────────────────────────────────────── */
/* A plan: per partition its covered range and content (0: no object), and how it was written: W_PARTITION, one
   final object per partition range, or W_MERGED, the partitions' objects concatenated into ONE merged object (one
   shard, one stream, one lane, and 4 records are far within the promotion limits: one merged object a plan). */
typedef Plan { byte written; byte first[NP]; byte last[NP]; byte content[NP] };   /* written: layouts, bitmask */
#define W_PARTITION 1
#define W_MERGED 2
Plan plan[(MAXCID + 1) * (MAXATT + 1)];
/* Candidates: the final objects' bytes prepare merged from what it verified, written once under keys that name
   those bytes (candidateKey), per attempt: in cand, bit CBIT(p, content) for a candidate of partition p with that
   content; in mcand, bit MCBIT(content) for a merged candidate holding those records (the plan's partitions'
   objects concatenated). Promote copies the one its voted plan names to the final key, pinned to its ETag. */
#ifdef PARTITION_LAYOUT
byte cand[(MAXCID + 1) * (MAXATT + 1)];
#define CBIT(p, c) BIT((p) * 4 + ((c) >> ((p) * NO)))
#endif
#ifdef MERGED_LAYOUT
short mcand[(MAXCID + 1) * (MAXATT + 1)];
#define MCBIT(c) BIT((c) - 1)
#endif
/* files: bitmask of per-partition final-object slots (key 0), or of the slices SL(p, first, last) of the merged
   object `key` (the manifest entries promote recorded: each partition range a slice, with its own bytes). */
typedef Promotion { bool written; int files; byte key };
Promotion promo[(MAXCID + 1) * (MAXATT + 1)];
#define WORK(c, a) ((c) * (MAXATT + 1) + (a))

/* A final object's key is (partition, first offset, last offset): finalObjectKey. NSALT > 1 only lets the
   MUT_FINAL_KEY_PER_EXECUTION mutation add the writer to the key. */
#define NSALT 4
#define SLOT(p, f, l, s) ((((p) * NO + (f)) * NO + (l)) * NSALT + (s))
#define NSLOTS 32
#ifdef PARTITION_LAYOUT
byte finalObj[NSLOTS];      /* content (record bitmask); 0: absent */
#endif
/* A merged object's key is (checkpoint, attempt, shard, index), named by the plan of that attempt and shard
   (code: mergedObjectKey(), mergedKeyOf()); one shard and one object a plan, so (checkpoint, attempt). Key 0 is
   no key. The mutations drop the attempt or the checkpoint from it. */
#if defined(MUT_MERGED_KEY_WITHOUT_ATTEMPT)
#define MKEY(c, a) WORK(c, 0)
#elif defined(MUT_MERGED_KEY_WITHOUT_CHECKPOINT)
#define MKEY(c, a) WORK(0, a)
#else
#define MKEY(c, a) WORK(c, a)
#endif
#define NMKEYS ((MAXCID + 1) * (MAXATT + 1))
#ifdef MERGED_LAYOUT
byte mergedObj[NMKEYS];     /* content (record bitmask: the concatenation of its slices); 0: absent */
#endif
/* A slice: partition p's range first..last of a merged object; its records are that range's (offsets 0..NO-1,
   one record each, the covered ones contiguous). */
#define SL(p, f, l) (((p) * NO + (f)) * NO + (l))
#define NSL 8
#define RANGE(p, f, l) ((BIT((l) - (f) + 1) - 1) << REC(p, f))
bool manifest[MAXCID + 1];
int manifestFiles[MAXCID + 1];  /* per-partition slots, or slices of manifestKey */
byte manifestKey[MAXCID + 1];   /* the merged object whose slices the manifest lists; 0: whole objects */

/* ── ghosts: what happened, for the properties ─────────────────────────────────────────────────────────── */
byte stagedCnt[NR];         /* effects applied per record (P1, P2: at most once) */
bool acked[NP];             /* the mapping acknowledged the partition's batch */
bool ttlPassed;             /* a claim of K outlived its TTL: a later record with K is no longer a duplicate */
bool lapsed[NEXEC];             /* execution e's lease lapsed while it ran */
byte pfaults; byte cfaults; byte lapses; byte expiries;
byte running;               /* processes of the fault phase still running */
byte outcome[NEXEC];            /* how execution e's Begin routed */
#define R_NONE 0
#define R_BUSY 1
#define R_EMPTY 2
#define R_WORK 3
#define R_HANDOFF 4         /* begin answered handoff: the Express execution started a Standard one and ended */
byte nextExec = FIRST_STANDARD;   /* the id of the next Standard execution a hand-off starts */

/* ══ processor (shared/processor/processor.ts) ═══════════════════════════════════════════════════════════ */

/* A crash of the invocation at this point (ProcessorHooks.onStep): the mapping retries the batch; a zombie stops.
   It is the first statement of the atomic step that follows the point, so it adds no interleavings of its own. */
#define PCRASH if :: pfaults < PFAULTS -> pfaults++; goto crashed :: true -> skip fi

proctype Processor(byte p; bool zombie) {
  short f; short cache; bool cached;
  byte pending; byte dropped; bool claimed; bool takeover; byte o; bool kept; bool inTxn;
  bool txnMode;               /* claimWrite of this invocation: true for in-transaction, false for ahead */
  byte me = REC(p, 0) + 1;    /* claimant of the partition's keyed record: topic#partition#offset */

invoke:
  /* code: Processor.processEvent (one invocation of the batch); code: Processor.stagePartition */
  atomic {
    if
    :: cached -> f = cache                                   /* warm container: the fence as last seen */
    :: true -> f = fence[p]; cache = f; cached = true        /* code: StagingLedger.readFence */
    fi;
#ifdef MUT_NO_REDELIVERY_DROP
    pending = 3;
#else
    pending = ABOVE(f);                                      /* P4: records <= fence are redeliveries */
#endif
    dropped = 0; takeover = false;
#if defined(CLAIM_WRITE_SWITCH)
    /* claimWrite is a setting: a redeploy that changes it lets an invocation of the new setting retry a batch
       (or run beside a zombie) of the old one. Each invocation runs with either. */
    if :: txnMode = true :: txnMode = false fi;
#elif defined(CLAIMS_IN_TRANSACTION)
    txnMode = true;
#endif
    claimed = txnMode || !(pending & 1);                     /* claims ahead only if a keyed record is pending */
  }
claims:
  atomic {
    if
    :: claimed -> goto chunk
    :: else -> skip
    fi;
    /* code: PartitionStager.claimAhead, once, before the first chunk is planned: claims ahead are judged against
       a fresh fence (PartitionStager.reread) */
    claimed = true; f = fence[p]; cache = f; pending = pending & ABOVE(f)
  }
  atomic {                                                   /* code: StagingLedger.claimAhead */
    if
    :: (pending & 1) && !(dropped & 1) ->
       if
#if defined(MUT_CLAIM_AHEAD_UNCONDITIONAL)
       :: true ->
#elif defined(MUT_CLAIM_AHEAD_NO_CLAIMANT)
       :: claimant == 0 ->
#elif defined(MUT_CLAIM_AHEAD_TAKES_EXPIRED)
       :: claimant == 0 || claimant == me || claimExpired ->
#else
       :: claimant == 0 || (claimant == me && !claimExpired) ->   /* absent, or ours and live (expiresAt >= now) */
#endif
          claimant = me; claimExpired = false
       :: else ->
          if
          :: claimExpired -> takeover = true                 /* taken over inside the fenced transaction */
          :: else -> dropped = dropped | 1                   /* a duplicate by key */
          fi
       fi
    :: else -> skip
    fi
  }
chunk:
  atomic {
    PCRASH;     /* after-claims, after-transaction, before-stage-write, after-stage-write, before-return */
    if
    :: pending == 0 -> goto finished
    :: else -> o = ((pending & 1) -> 0 : 1); kept = !(dropped & BIT(o))   /* code: planChunk() */
    fi
    /* code: StagedWriter.put: the in-progress object, under a key unique to the attempt: no shared state */
  }
stage:
  atomic {                                                   /* code: StagingLedger.stage (TransactWriteItems) */
    inTxn = kept && KEYED(o) && (txnMode || takeover);
    if
#ifdef MUT_NO_FENCE_CONDITION
    :: (kept && entry[REC(p, o)] == 1) ->
#else
    :: fence[p] != f || (kept && entry[REC(p, o)] == 1) ->   /* stagedOffset = :expected; entry attribute_not_exists */
#endif
       f = fence[p]; cache = f; pending = pending & ABOVE(f)   /* FenceMovedError, then Processor.refreshFence */
    :: else ->
       if
#ifdef MUT_CLAIM_TXN_NO_CLAIMANT
       :: inTxn && !(claimant == 0 || claimExpired) ->
#else
       :: inTxn && !(claimant == 0 || claimExpired || claimant == me) ->   /* absent, expired, or ours */
#endif
          dropped = dropped | BIT(o)                         /* ClaimsTakenError: a duplicate by key */
       :: else ->
          fence[p] = o;
          if
          :: kept ->
             entry[REC(p, o)] = 1;
             stagedCnt[REC(p, o)]++;
             assert(stagedCnt[REC(p, o)] == 1);              /* P1/P2: a record's effects apply once */
             /* P4: a key is staged once, unless its claim outlived the TTL */
             assert(!KEYED(o) || stagedCnt[REC(1 - p, 0)] == 0 || ttlPassed)
          :: else -> skip
          fi;
          if
          :: inTxn -> claimant = me; claimExpired = false
          :: else -> skip
          fi;
          f = o; cache = o; pending = pending & ~BIT(o)
       fi
    fi;
    o = 0; kept = false; inTxn = false;
    goto chunk
  }
finished:
  atomic {
    o = 0; kept = false;
    if
    :: zombie -> goto gone
    :: else -> acked[p] = true
    fi;
    /* The mapping's offset commit is lost: the acknowledged batch is delivered again. */
    if
    :: pfaults < PFAULTS -> pfaults++; goto invoke
    :: true -> goto gone
    fi
  }
crashed:
  atomic {
    o = 0; kept = false;
    if
    :: zombie -> goto gone
    :: else -> goto invoke
    fi
  }
gone:
  atomic { f = 0; cache = 0; cached = false; pending = 0; dropped = 0; claimed = false; takeover = false;
           txnMode = false; running-- }
}

/* The staging side reduced to its effect on the coordinator (scenario "checkpoint"): one instance per
   partition, no faults, no keys: each record staged by one fenced transaction. */
proctype Stager(byte p) {
  byte o;
  do
  :: o < NO ->
     atomic {                                                /* code: StagingLedger.stage */
       assert(fence[p] == o - 1);
       fence[p] = o; entry[REC(p, o)] = 1; stagedCnt[REC(p, o)]++;
       if :: o == NO - 1 -> acked[p] = true :: else -> skip fi;
       o++
     }
  :: else -> break
  od;
  atomic { o = 0; running-- }
}

/* ══ coordinator (shared/coordinator/coordinator.ts, run by the state machine of definition.ts) ══════════ */
/* Each atomic block below is ONE AWS call, with the step's local decisions around it. */

#define S_BEGIN 1
#define S_PREPARE 2
#define S_DECIDE 3
#define S_PROMOTE 4
#define S_COMMIT 5
#define S_CLEANUP 6
#define S_ABORT 7

/* The step's Lambda fails here (crash, timeout, a transient error outlasting its retries). */
#define FAULT if :: faulty && cfaults < CFAULTS -> cfaults++; goto failed :: true -> skip fi
/* A conditional write lost, or the record is not in the status the step needs (CheckpointStateError). */
#define CONFLICT goto conflict
/* A step that fails on a condition a fault-free run never meets (progress): only after faults. */
#define STUCK assert(faulty); goto conflict
/* Prepare's candidates, merged from the bytes its first step verified (the plan's contents), each written once
   under the key its bytes name (If-None-Match: *; a 412 finds the same bytes): one a partition, or, merged, one
   for all of the plan's partitions (their objects' bytes concatenated, code: planMergedShard()). */
#define CANDIDATES \
  atomic {                                    /* code: writeCandidate(), putOnce() (If-None-Match: *) */ \
    FAULT; \
    p = 0; \
    do \
    :: p < NP -> \
       content = plan[WORK(cid, att)].content[p]; \
       if \
       :: content != 0 && !merged -> PARTITION_CANDIDATE \
       :: else -> whole = whole | content \
       fi; \
       p++ \
    :: else -> break \
    od; \
    if :: whole != 0 -> MERGED_CANDIDATE :: else -> skip fi; \
    p = 0; content = 0; whole = 0 \
  }
#ifdef PARTITION_LAYOUT
#define PARTITION_CANDIDATE cand[WORK(cid, att)] = cand[WORK(cid, att)] | CBIT(p, content)
#define CLEAR_CANDIDATES_P cand[WORK(cid, att)] = 0
#else
#define PARTITION_CANDIDATE assert(false)
#define CLEAR_CANDIDATES_P skip
#endif
#ifdef MERGED_LAYOUT
#define MERGED_CANDIDATE mcand[WORK(cid, att)] = mcand[WORK(cid, att)] | MCBIT(whole)
#define CLEAR_CANDIDATES_M mcand[WORK(cid, att)] = 0
#else
#define MERGED_CANDIDATE assert(false)
#define CLEAR_CANDIDATES_M skip
#endif

/* Promote's copy of a candidate holding `bytes` to a final object `obj`: write-once (If-None-Match: *), and S3's
   412 is accepted only if the object there holds the candidate's bytes (a retry, a concurrent roll-forward), else
   FinalObjectConflictError. */
#if defined(MUT_FINAL_NO_IF_NONE_MATCH)
#define COPY_ONCE(obj, bytes) assert(obj == 0 || obj == bytes); obj = bytes   /* C7: a final object never changes */
#elif defined(MUT_FINAL_CONFLICT_UNCHECKED)
#define COPY_ONCE(obj, bytes) if :: obj == 0 -> obj = bytes :: else -> skip fi   /* any 412 taken for a retry's */
#else
#define COPY_ONCE(obj, bytes) if :: obj == 0 || obj == bytes -> obj = bytes :: else -> STUCK fi
#endif

#ifdef MUT_TRANSITION_NO_ATTEMPT
#define HATT_OK true
#define RATT_OK true
#else
#define HATT_OK (hAtt == att)
#define RATT_OK (rec[cid].att == att)
#endif
/* CheckpointStore.transition's condition: head and record at (id, attempt) in one of the `from` statuses */
#define TRANSITION_OK(from1, from2) \
  (hId == cid && HATT_OK && (hStatus == from1 || hStatus == from2) && \
   RATT_OK && (rec[cid].status == from1 || rec[cid].status == from2))
#ifdef MUT_IGNORE_LEASE
#define LEASE_PASSED true
#else
#define LEASE_PASSED (!sLive)
#endif
#ifdef MUT_ABORT_AFTER_DECISION
#define ABORTABLE(c) (TRANSITION_OK(BEGUN, PREPARED) || TRANSITION_OK(COMMITTING, COMMITTING))
#else
#define ABORTABLE(c) TRANSITION_OK(BEGUN, PREPARED)
#endif
#ifdef MUT_ABORT_AFTER_DECISION
#define ABORT_DECIDED true
#else
#define ABORT_DECIDED false
#endif
#define READ_HEAD sId = hId; sAtt = hAtt; sStatus = hStatus; sOwner = hOwner; sLive = hLive; sLease = hLease; \
                  sCommitted = hCommitted; sAborted = hAborted
#define FORGET_HEAD sId = 0; sAtt = 0; sStatus = 0; sOwner = 0; sLive = false; sLease = 0; sAborted = false

/* begin answered handoff (an Express execution, EXPRESS): nothing was changed; go to the HandOff state. */
#define HAND_OFF outcome[e] = R_HANDOFF; goto handoff
/* Begin's Catch (buildCoordinatorDefinition()): Standard, Abort with no id (which aborts a checkpoint this execution
   id owns before its decision); Express, the Fail state BeginFailed, no abort (expressStates()): the checkpoint this
   execution id owns may be the other run's, and its lease decides. */
#ifdef MUT_EXPRESS_BEGIN_FAIL_ABORTS
#define BEGIN_CATCH_ABORTS true
#else
#define BEGIN_CATCH_ABORTS (!express)
#endif
/* Prepare's vote refused (CheckpointConflictError: the attempt is no longer BEGUN) is read again (CheckpointCoordinator.votedByTwin):
   the same attempt PREPARED, COMMITTING or COMMITTED with this shard's vote in is another run's vote (a twin, a
   retry whose first invocation still runs) decided on from there: prepare stands down (done, count 0) and the state
   machine goes on to Decide. Anything else: the conflict stands (Catch -> Abort, which T2 requires to find nothing
   to abort). */
#if defined(MUT_VOTE_STANDS_DOWN_WITHOUT_OWN_VOTE)
#define VOTED_BY_TWIN (rec[cid].att == att && (rec[cid].status == PREPARED || rec[cid].status == COMMITTING || \
                       rec[cid].status == COMMITTED))
#elif defined(MUT_VOTE_STANDS_DOWN_ONLY_DECIDED)
#define VOTED_BY_TWIN (rec[cid].att == att && (rec[cid].status == COMMITTING || rec[cid].status == COMMITTED) && \
                       rec[cid].vote != 0)
#elif defined(MUT_VOTE_STANDS_DOWN_ANY_ATTEMPT)
#define VOTED_BY_TWIN ((rec[cid].status == PREPARED || rec[cid].status == COMMITTING || \
                        rec[cid].status == COMMITTED) && rec[cid].vote != 0)
#else
#define VOTED_BY_TWIN (rec[cid].att == att && (rec[cid].status == PREPARED || rec[cid].status == COMMITTING || \
                       rec[cid].status == COMMITTED) && rec[cid].vote != 0)
#endif

/* decide's re-read after a conflict (decidedByTwin()): the decision already taken, COMMITTING or committed since.
   MUT_DECIDE_COMMITTED_CONFLICT: COMMITTED is a conflict, as at 486907a (Catch -> Abort, which finds it decided). */
#ifdef MUT_DECIDE_COMMITTED_CONFLICT
#define DECIDED_BY_TWIN (rec[cid].status == COMMITTING)
#else
#define DECIDED_BY_TWIN (rec[cid].status == COMMITTING || rec[cid].status == COMMITTED)
#endif

proctype Execution(byte e; bool faulty; bool express) {
  byte cid; byte att; byte st; byte p; byte o; byte s; byte slot; int files; bool ok;
  byte sId; byte sAtt; byte sStatus; byte sOwner; bool sLive; byte sLease; byte sCommitted; bool sAborted;
  byte mine;                  /* ghost: WORK(id, attempt) of the attempt this run allocated, 0 for none (T1) */
  bool moved;                 /* ghost: this run is in Abort because another run moved its attempt first, not
                                 because a step of its own failed: it must find nothing to abort (T2) */
  short cut[NP]; byte first; byte last; byte content;
  bool merged;                /* the layout of the plan this prepare writes, or promote copies (Plan.written) */
  byte whole;                 /* a merged object's records: its slices' together */

s_begin:
  atomic {                                                   /* code: CheckpointCoordinator.begin */
    st = S_BEGIN; cid = 0; att = 0;
    FAULT;
    READ_HEAD;                                               /* code: CheckpointStore.readHead */
    if
    :: IN_FLIGHT(sStatus) && sOwner == e ->                  /* code: resume() */
       cid = sId; att = sAtt; s = sStatus; FORGET_HEAD; goto b_resume
    :: IN_FLIGHT(sStatus) && sOwner != e && !LEASE_PASSED -> /* head.leaseUntil > now: another one is alive */
       outcome[e] = R_BUSY; goto stopped
#if defined(MUT_HANDOFF_AFTER_ABORT_EXPIRED)
    :: IN_FLIGHT(sStatus) && sOwner != e && LEASE_PASSED && express && sStatus == COMMITTING -> HAND_OFF
    :: IN_FLIGHT(sStatus) && sOwner != e && LEASE_PASSED && express && sStatus != COMMITTING -> goto b_abort_expired
#elif defined(MUT_HANDOFF_AFTER_TAKEOVER)
    :: IN_FLIGHT(sStatus) && sOwner != e && LEASE_PASSED && express && sStatus != COMMITTING -> HAND_OFF
    :: IN_FLIGHT(sStatus) && sOwner != e && LEASE_PASSED && express && sStatus == COMMITTING -> goto b_takeover
#else
    /* An expired checkpoint is recovered by a Standard workflow: the Express one hands it off, changing nothing. */
    :: IN_FLIGHT(sStatus) && sOwner != e && LEASE_PASSED && express -> HAND_OFF
#endif
    :: IN_FLIGHT(sStatus) && sOwner != e && LEASE_PASSED && !express && sStatus == COMMITTING && !ABORT_DECIDED ->
       goto b_takeover
    :: IN_FLIGHT(sStatus) && sOwner != e && LEASE_PASSED && !express && (sStatus != COMMITTING || ABORT_DECIDED) ->
       goto b_abort_expired
    :: else -> goto b_cut
    fi
  }
/* A retried begin of the execution that allocated, or (EXPRESS) the other run of the same execution: the record is
   read in a second call, so the other run may have moved it on since the head was read. The attempt is taken
   wherever it is now, routed by the record's status (COMMITTING: commit, else checkpoint); an attempt that has
   ended (or been superseded) since is not this run's to act on: busy, as another execution's would be. */
b_resume:
  atomic {                             /* code: CheckpointStore.readRecord (resume()) */
    FAULT;
#ifdef MUT_RESUME_EXACT_STATUS
    /* 03f684b: requireRecord(id, attempt, [the head's status]): CheckpointStateError once the other run moved it */
    if :: rec[cid].att != att || rec[cid].status != s -> s = 0; CONFLICT :: else -> skip fi;
#else
    if :: rec[cid].att != att || !IN_FLIGHT(rec[cid].status) -> s = 0; outcome[e] = R_BUSY; goto stopped
       :: else -> s = rec[cid].status fi;
#endif
    outcome[e] = R_WORK;
    if :: s == COMMITTING -> s = 0; goto s_promote :: else -> s = 0; goto s_prepare fi
  }
b_takeover:
  atomic {                                    /* code: CheckpointStore.takeOver (rollForward()) */
    FAULT;
#ifdef MUT_TAKEOVER_NO_LEASE_CONDITION
    ok = (hId == sId && hAtt == sAtt && hStatus == sStatus);
#else
    ok = (hId == sId && hAtt == sAtt && hStatus == sStatus && hLease == sLease);
#endif
    if
    :: ok -> assert(lapsed[hOwner]); hOwner = e; hLive = true; hLease++   /* C1: only a lapsed lease is taken */
    :: else -> outcome[e] = R_BUSY; goto stopped
    fi;
#ifdef MUT_HANDOFF_AFTER_TAKEOVER
    if :: express -> FORGET_HEAD; HAND_OFF :: else -> skip fi;
#endif
    cid = sId; att = sAtt; FORGET_HEAD;
    /* code: requireRecord() */
    if :: rec[cid].att != att || rec[cid].status != COMMITTING -> CONFLICT :: else -> skip fi;
    outcome[e] = R_WORK;
    goto s_promote
  }
b_abort_expired:
  atomic {                          /* code: CheckpointStore.transition (abortExpired()) */
    FAULT;
    cid = sId; att = sAtt;
    ok = ABORTABLE(cid);
    if
    :: ok -> assert(lapsed[hOwner]); hStatus = ABORTED; rec[cid].status = ABORTED; hAborted = true   /* C1 */
    :: else -> outcome[e] = R_BUSY; goto stopped
    fi;
    cid = 0; att = 0;
#ifdef MUT_HANDOFF_AFTER_ABORT_EXPIRED
    if :: express -> HAND_OFF :: else -> skip fi;
#endif
    READ_HEAD                                                /* code: CheckpointStore.readHead */
  }
b_cut:
  atomic {                    /* code: CheckpointStore.committedCut, then StagedEntries.readFences (one Query) */
    FAULT;
    assert(sCommitted == 0 || rec[sCommitted].status == COMMITTED);
    cut[0] = (fence[0] > rec[sCommitted].cut[0] -> fence[0] : rec[sCommitted].cut[0]);
    cut[1] = (fence[1] > rec[sCommitted].cut[1] -> fence[1] : rec[sCommitted].cut[1]);
    if                                                       /* code: splitCut() */
    :: cut[0] == rec[sCommitted].cut[0] && cut[1] == rec[sCommitted].cut[1] ->
#ifdef MUT_HANDOFF_BEFORE_EMPTY_CHECK
       if :: express && sAborted -> HAND_OFF :: else -> skip fi;
#endif
       /* An abort leaves its attempt's cut uncommitted, and fences only grow: after an abort the cut is never empty
          (within the model: no partition leaves the fences), so where the hand-off after an abort is decided,
          before or after this check, does not show here (model/survivors.txt, MUT_HANDOFF_BEFORE_EMPTY_CHECK). */
       assert(!sAborted);
       outcome[e] = R_EMPTY; goto stopped
    :: else -> skip
    fi;
    /* code: allocateCheckpoint(): an Express begin leaves the attempt after an abort (consecutiveAborts > 0 in the
       head as read) to the Standard workflow, only with work to do, changing nothing */
#if !defined(MUT_HANDOFF_AFTER_ALLOCATE) && !defined(MUT_HANDOFF_BEFORE_EMPTY_CHECK)
    if :: express && sAborted -> HAND_OFF :: else -> skip fi;
#endif
#if defined(LONG_CHECKPOINTS) && !defined(MUT_LONG_HANDOFF_AFTER_ALLOCATE)
    /* and so the checkpoint after one that took longer than LONG_CHECKPOINT_MS from begin to commit, as recorded in
       the committed record begin reads (its `slow`, fixed when it committed) */
    if :: express && rec[sCommitted].slow -> HAND_OFF :: else -> skip fi;
#endif
    cid = sCommitted + 1;
    att = ((IN_FLIGHT(sStatus) || sStatus == ABORTED) && sId == cid -> sAtt + 1 : 1);
    assert(cid <= MAXCID && att <= MAXATT)                   /* the bounds hold every behaviour */
  }
  atomic {                                                   /* code: CheckpointStore.allocate (TransactWriteItems) */
    FAULT;
#ifdef MUT_ALLOCATE_NO_HEAD_CONDITION
    ok = (rec[cid].status == NONE || (rec[cid].status == ABORTED && rec[cid].att == att - 1));
#else
    ok = hId == sId && hAtt == sAtt && hStatus == sStatus &&
         (rec[cid].status == NONE || (rec[cid].status == ABORTED && rec[cid].att == att - 1));
#endif
    if
    :: ok ->
       hId = cid; hAtt = att; hStatus = BEGUN; hOwner = e; hLive = true; hLease++; hCommitted = sCommitted;
       rec[cid].att = att; rec[cid].status = BEGUN; rec[cid].vote = 0; rec[cid].vlay = 0;   /* REMOVE votes, planDigests: {} */
       rec[cid].cut[0] = cut[0]; rec[cid].cut[1] = cut[1];
       rec[cid].prev[0] = rec[sCommitted].cut[0]; rec[cid].prev[1] = rec[sCommitted].cut[1];
       outcome[e] = R_WORK; mine = WORK(cid, att)
    :: else -> outcome[e] = R_BUSY; goto stopped
    fi;
    FORGET_HEAD; sCommitted = 0; cut[0] = 0; cut[1] = 0
#ifdef MUT_HANDOFF_AFTER_ALLOCATE
    ; if :: express && hAborted -> HAND_OFF :: else -> skip fi
#endif
#if defined(LONG_CHECKPOINTS) && defined(MUT_LONG_HANDOFF_AFTER_ALLOCATE)
    ; if :: express && rec[hCommitted].slow -> HAND_OFF :: else -> skip fi
#endif
  }

s_prepare:
  atomic {            /* code: CheckpointCoordinator.prepare: CheckpointCoordinator.requireRecord, CheckpointCoordinator.coveredEntries, verifyStagedContents() */
    st = S_PREPARE;
    FAULT;
    /* COMMITTED too: a run trailing another run of its execution (twins) past the commit ends as done. */
    ok = rec[cid].att == att && (rec[cid].status == BEGUN || rec[cid].status == PREPARED ||
                                 rec[cid].status == COMMITTING || rec[cid].status == COMMITTED);
    /* A retry after this shard's vote counted, or after it voted in this attempt: its plan and candidates stand. */
    if :: !ok -> CONFLICT :: ok && (rec[cid].status != BEGUN || rec[cid].vote != 0) -> goto s_decide :: else -> skip fi;
    /* code: StagedEntries.entries: previousCut < lastOffset <= cut; code: planFinalObjects() */
#if defined(FINAL_OBJECTS_SWITCH)
    if :: merged = true :: merged = false fi;                /* code: planShard(): merged, or per partition */
#elif defined(PARTITION_OBJECTS)
    merged = false;
#else
    merged = true;                                           /* code: planShard(), planMergedShard() */
#endif
    p = 0;
    do
    :: p < NP ->
       first = 255; last = 0; content = 0; o = 0;
       do
       :: o < NO ->
#ifdef MUT_COVER_FROM_PREVIOUS_CUT
          if :: o >= rec[cid].prev[p] && o <= rec[cid].cut[p] && entry[REC(p, o)] == 1 ->
#else
          if :: o > rec[cid].prev[p] && o <= rec[cid].cut[p] && entry[REC(p, o)] == 1 ->
#endif
                if :: first == 255 -> first = o :: else -> skip fi;
                last = o; content = content | BIT(REC(p, o))
             :: else -> skip
          fi;
          o++
       :: else -> break
       od;
       /* A plan already written in this attempt (by a twin) covered the same entries: one content per attempt. */
       assert(plan[WORK(cid, att)].written == 0 || (plan[WORK(cid, att)].first[p] == first &&
              plan[WORK(cid, att)].last[p] == last && plan[WORK(cid, att)].content[p] == content));
       plan[WORK(cid, att)].first[p] = first; plan[WORK(cid, att)].last[p] = last;
       plan[WORK(cid, att)].content[p] = content;
       p++
    :: else -> break
    od;
    p = 0; o = 0; first = 0; last = 0; content = 0
  }
#ifndef MUT_VOTE_BEFORE_CANDIDATES
  CANDIDATES;
#endif
  atomic {                                    /* code: PlanStore.writePlan, then CheckpointStore.vote (TransactWriteItems) */
    FAULT;
#ifdef MUT_PLAN_KEY_WITHOUT_DIGEST
    plan[WORK(cid, att)].written = (merged -> W_MERGED : W_PARTITION);   /* one key per shard: replaced */
#else
    plan[WORK(cid, att)].written = plan[WORK(cid, att)].written | (merged -> W_MERGED : W_PARTITION);   /* planKey() */
#endif
#if defined(MUT_VOTE_NO_ATTEMPT)
    ok = rec[cid].status == BEGUN && hId == cid && hStatus == BEGUN;
#elif defined(MUT_VOTE_AFTER_DECISION)
    ok = rec[cid].att == att && hId == cid && hAtt == att;
#else
    ok = rec[cid].att == att && rec[cid].status == BEGUN && hId == cid && hAtt == att && hStatus == BEGUN;
#endif
    if :: ok -> rec[cid].vote = att; rec[cid].vlay = (merged -> W_MERGED : W_PARTITION); hLive = true; hLease++;
             goto p_voted                                    /* the last vote wins */
       :: else -> skip fi
  }
  /* The refused vote, re-read in a second call: the other run may have moved the attempt on in between too. */
  atomic {                            /* code: CheckpointStore.readRecord (CheckpointCoordinator.votedByTwin) */
    FAULT;
#ifdef MUT_VOTE_CONFLICT_ABORTS
    CONFLICT                                                 /* before 131ffa7: the refused vote throws, Catch -> Abort */
#else
    if :: VOTED_BY_TWIN -> goto s_decide :: else -> CONFLICT fi
#endif
  }
p_voted:
#ifdef MUT_VOTE_BEFORE_CANDIDATES
  CANDIDATES;
#endif

s_decide:
  atomic {                               /* code: CheckpointCoordinator.decide, decideCheckpoint() */
    st = S_DECIDE; merged = false;
    FAULT;
    /* COMMITTED too: a run trailing another run of its execution finds the decision taken (and committed since). */
    ok = rec[cid].att == att && (rec[cid].status == BEGUN || rec[cid].status == PREPARED ||
                                 rec[cid].status == COMMITTING || rec[cid].status == COMMITTED);
    s = rec[cid].status;
    if
    :: !ok -> CONFLICT
    :: ok && (s == COMMITTING || s == COMMITTED) -> s = 0; goto s_promote
    :: ok && s == PREPARED -> s = 0; goto d_commit
    :: else -> s = 0
    fi;
#ifndef MUT_DECIDE_WITHOUT_VOTES
    if :: rec[cid].vote == 0 -> STUCK :: else -> skip fi   /* VotesIncompleteError */
#else
    skip
#endif
  }
  /* The record was read above; the transition is a second call, so a superseded attempt's Decide can land here
     after its attempt was aborted and the next one allocated (a zombie execution whose lease lapsed), and the other
     run of the same execution (twins) can have moved the attempt in between. */
  atomic {                                                   /* code: CheckpointStore.transition BEGUN -> PREPARED */
    FAULT;
#ifdef MUT_DECIDE_WITHOUT_VOTES
    ok = TRANSITION_OK(BEGUN, BEGUN);
#else
    ok = TRANSITION_OK(BEGUN, BEGUN) && rec[cid].vote != 0;   /* size(votes) = :shardCount */
#endif
    if :: ok -> hStatus = PREPARED; rec[cid].status = PREPARED; goto d_prepared :: else -> skip fi
  }
  /* The conflict, re-read in a third call: the same attempt PREPARED is another run's transition, taken as this
     one's (go on); COMMITTING, or COMMITTED since, is the decision already taken (decided: promote, which finds
     COMMITTED done too); else the conflict stands. */
  atomic {                            /* code: CheckpointStore.readRecord (decidedByTwin()) */
    FAULT;
#ifdef MUT_DECIDE_CONFLICT_ABORTS
    CONFLICT                                                 /* 03f684b: every conflict throws, Catch -> Abort */
#else
    if
    :: rec[cid].att == att && rec[cid].status == PREPARED -> goto d_commit
    :: rec[cid].att == att && DECIDED_BY_TWIN -> goto d_decided
    :: else -> CONFLICT
    fi
#endif
  }
d_prepared:
#ifdef MUT_PROMOTE_BEFORE_DECISION
  goto s_promote;                                            /* promotion before the decision record */
#endif
d_commit:
  atomic {                                                   /* code: CheckpointStore.transition PREPARED -> COMMITTING */
    FAULT;
    ok = TRANSITION_OK(PREPARED, PREPARED);
    if :: ok -> hStatus = COMMITTING; rec[cid].status = COMMITTING; hLive = true; hLease++; goto d_decided
       :: else -> skip fi
  }
  atomic {                            /* code: CheckpointStore.readRecord (decidedByTwin()) */
    FAULT;
#ifdef MUT_DECIDE_CONFLICT_ABORTS
    CONFLICT
#else
    if :: rec[cid].att == att && DECIDED_BY_TWIN -> goto d_decided :: else -> CONFLICT fi
#endif
  }
d_decided:
#ifdef MUT_PROMOTE_BEFORE_DECISION
  goto s_commit;
#endif

s_promote:
  atomic {                                                   /* code: CheckpointCoordinator.promote */
    st = S_PROMOTE;
    FAULT;
#ifdef MUT_PROMOTE_BEFORE_DECISION
    ok = rec[cid].att == att && (rec[cid].status == PREPARED || rec[cid].status == COMMITTING ||
                                 rec[cid].status == COMMITTED);
#else
    ok = rec[cid].att == att && (rec[cid].status == COMMITTING || rec[cid].status == COMMITTED);
#endif
    if :: !ok -> CONFLICT :: ok && rec[cid].status == COMMITTED -> goto s_commit :: else -> skip fi;
    /* code: CheckpointStore.renewLease */
    if :: hId == cid && hAtt == att && hStatus == COMMITTING -> hLive = true; hLease++ :: else -> skip fi;
    /* code: PlanStore.readPlan, CheckpointCoordinator.readVotedPlan: the plan under this attempt's prefix whose key
       the recorded digest names. A digest recorded by another attempt's prepare names none there, and a lost plan
       is not derived again: WorkObjectMissingError or PlanDigestMismatchError, every time, until restored. */
    if :: (plan[WORK(cid, att)].written & rec[cid].vlay) == 0 || rec[cid].vote != att -> STUCK :: else -> skip fi
    files = 0; p = 0;
    merged = (rec[cid].vlay == W_MERGED);
    if :: merged -> goto p_merged :: else -> skip fi
  }
#ifdef PARTITION_LAYOUT
  /* One final object per partition range. */
  do
  :: p < NP ->
     atomic {   /* code: Promoter.promoteShard: copyPinned() of the candidate (x-amz-copy-source-if-match, If-None-Match: *) */
       FAULT;
       content = plan[WORK(cid, att)].content[p];
       if
       :: content != 0 ->
          first = plan[WORK(cid, att)].first[p]; last = plan[WORK(cid, att)].last[p];
          /* The copy's source is the candidate the plan names, never a staged object. */
          if :: (cand[WORK(cid, att)] & CBIT(p, content)) == 0 -> STUCK :: else -> skip fi;   /* CandidateLostError */
#ifdef MUT_FINAL_KEY_PER_EXECUTION
          slot = SLOT(p, first, last, e % NSALT);
#else
          slot = SLOT(p, first, last, 0);                    /* code: finalObjectKey() */
#endif
          COPY_ONCE(finalObj[slot], content);
          files = files | BIT(slot)
       :: else -> skip
       fi;
       slot = 0; first = 0; last = 0; content = 0;
       p++
     }
  :: else -> p = 0; goto p_record
  od;
#endif
p_merged:
#ifdef MERGED_LAYOUT
  /* Merged: the plan's partition ranges are slices of one merged object, copied once. */
  atomic {   /* code: Promoter.promoteShard: assertMergedSlices(), then one copyPinned() of the merged candidate for all of its slices */
    FAULT;
    p = 0;
    do
    :: p < NP ->
       content = plan[WORK(cid, att)].content[p];
       if
       :: content != 0 ->
          whole = whole | content;
          /* the manifest entry: the partition's range as a slice, with its own bytes and SHA-256 (manifestFile()) */
          files = files | BIT(SL(p, plan[WORK(cid, att)].first[p], plan[WORK(cid, att)].last[p]))
       :: else -> skip
       fi;
       p++
    :: else -> break
    od;
    p = 0; content = 0;
    if
    :: whole != 0 ->
       if :: (mcand[WORK(cid, att)] & MCBIT(whole)) == 0 -> STUCK :: else -> skip fi;   /* CandidateLostError */
       /* The key the voted plan names (code: mergedKeyOf()), of its own checkpoint, attempt and shard
          (assertMergedSlices()): MKEY(cid, att). */
       slot = MKEY(cid, att);
       COPY_ONCE(mergedObj[slot], whole)
    :: else -> skip
    fi;
    whole = 0
  }
#endif
p_record:
  atomic {                                                   /* code: PlanStore.writePromotion */
    FAULT;
    promo[WORK(cid, att)].written = true; promo[WORK(cid, att)].files = files; promo[WORK(cid, att)].key = slot;
    files = 0; slot = 0
#ifdef MUT_PROMOTE_BEFORE_DECISION
    ; if :: rec[cid].status == PREPARED -> goto d_commit :: else -> skip fi
#endif
  }

s_commit:
  atomic {                 /* code: CheckpointCoordinator.commit: CheckpointCoordinator.requireRecord, PlanStore.readPromotion */
    st = S_COMMIT;
    FAULT;
    ok = rec[cid].att == att && (rec[cid].status == COMMITTING || rec[cid].status == COMMITTED);
    if :: !ok -> CONFLICT :: ok && rec[cid].status == COMMITTED -> goto s_cleanup :: else -> skip fi;
    if
    :: !promo[WORK(cid, att)].written -> STUCK
    :: else -> files = promo[WORK(cid, att)].files; slot = promo[WORK(cid, att)].key
    fi
  }
  atomic {                                                   /* code: ManifestStore.write, putIfAbsent() (If-None-Match: *) */
    FAULT;
    /* C7: nothing is visible without the decision; the log is gap-free */
    assert(rec[cid].status == COMMITTING || rec[cid].status == COMMITTED);
    assert(cid == 1 || manifest[cid - 1]);
#ifdef MUT_MANIFEST_NO_IF_NONE_MATCH
    ok = true;
    assert(!manifest[cid] || (manifestFiles[cid] == files && manifestKey[cid] == slot));   /* C7: never changes */
#else
    ok = !manifest[cid] || (manifestFiles[cid] == files && manifestKey[cid] == slot);
#endif
    if
    :: ok -> manifest[cid] = true; manifestFiles[cid] = files; manifestKey[cid] = slot; files = 0; slot = 0
    :: else -> STUCK                                         /* ManifestConflictError */
    fi
  }
  atomic {           /* code: CheckpointStore.transition COMMITTING -> COMMITTED (CheckpointCoordinator.markCommitted) */
    FAULT;
    ok = TRANSITION_OK(COMMITTING, COMMITTING);
    if :: ok -> hStatus = COMMITTED; rec[cid].status = COMMITTED; hCommitted = cid; hAborted = false;
#ifdef LONG_CHECKPOINTS
          if :: rec[cid].slow = true :: true -> skip fi;     /* committedAt - begunAt > LONG_CHECKPOINT_MS, or not */
#endif
          skip
       :: else -> skip fi;
    /* lost the race to a concurrent roll-forward: fine if it committed (requireRecord COMMITTED) */
    if :: !ok && !(rec[cid].att == att && rec[cid].status == COMMITTED) -> CONFLICT :: else -> skip fi
  }

s_cleanup:
  atomic {         /* code: CheckpointCoordinator.cleanup: deleteKeys(), StagedEntries.deleteEntries (<= the committed cut) */
    st = S_CLEANUP;
    FAULT;
    if :: rec[cid].att != att || rec[cid].status != COMMITTED -> CONFLICT :: else -> skip fi;
    p = 0;
    do
    :: p < NP ->
       o = 0;
       do
       :: o < NO ->
          if :: o <= rec[cid].cut[p] && entry[REC(p, o)] == 1 -> entry[REC(p, o)] = 2 :: else -> skip fi;
          o++
       :: else -> break
       od;
       p++
    :: else -> break
    od;
    p = 0; o = 0;
    goto stopped
  }

s_abort:
  atomic {                   /* code: CheckpointCoordinator.abort: CheckpointStore.readHead, CheckpointStore.readRecord */
    st = S_ABORT;
    FAULT;
    if
    :: cid == 0 && hOwner == e && BEFORE_DECISION(hStatus) ->   /* begin failed after allocating */
       /* T1: begin's Catch aborts the checkpoint this execution id owns only when this very run allocated it: not
          one the other run of the same execution (twins) allocated and is running */
       assert(mine == WORK(hId, hAtt));
       cid = hId; att = hAtt
    :: cid == 0 -> goto stopped
    :: else -> skip
    fi;
#ifndef MUT_ABORT_AFTER_DECISION
    /* outcome 'decided': the state machine rolls forward */
    if :: rec[cid].att == att && (rec[cid].status == COMMITTING || rec[cid].status == COMMITTED) -> goto s_promote
       :: else -> skip fi;
#endif
    /* code: CheckpointStore.transition (markAborted()) */
    if
    :: ABORTABLE(cid) ->
       /* T2: an abort caught from a conflict (another run moved the attempt first: a twin, a recoverer) finds the
          attempt ended or decided: only a step failure of this run's own aborts an attempt it is running */
       assert(!moved);
       hStatus = ABORTED; rec[cid].status = ABORTED; hAborted = true
    :: else -> skip
    fi;
    /* code: PlanStore.deleteAttempt (plans, candidates, promotion records) */
    plan[WORK(cid, att)].written = 0; promo[WORK(cid, att)].written = false;
    CLEAR_CANDIDATES_P; CLEAR_CANDIDATES_M;
    goto stopped
  }

failed:
  atomic {
    if
    :: goto retry                                            /* Step Functions retries the step */
    :: goto stopped                      /* the execution dies (timeout; CommitIncomplete; Express: BeginFailed) */
    :: st == S_BEGIN && BEGIN_CATCH_ABORTS -> cid = 0; att = 0; goto s_abort   /* Catch -> Abort: no id handed back */
    :: st == S_PREPARE || st == S_DECIDE -> goto s_abort     /* Catch -> Abort */
    fi
  }
conflict:
  atomic {
    if
    :: st == S_BEGIN && BEGIN_CATCH_ABORTS -> cid = 0; att = 0; moved = true; goto s_abort
    :: st == S_BEGIN && !BEGIN_CATCH_ABORTS ->
       /* T3: an Express execution fails at BeginFailed (an alarm) only on a step failure of its own: begin's reads
          after the head answer busy when the other run has moved the attempt on, never a conflict */
       assert(st != S_BEGIN)
    :: st == S_PREPARE || st == S_DECIDE -> moved = true; goto s_abort
    :: else -> goto stopped
    fi
  }
retry:
  atomic {
    p = 0; o = 0; s = 0; slot = 0; files = 0; first = 0; last = 0; content = 0; merged = false; whole = 0;
    if
    :: st == S_BEGIN -> goto s_begin
    :: st == S_PREPARE -> goto s_prepare
    :: st == S_DECIDE -> goto s_decide
    :: st == S_PROMOTE -> goto s_promote
    :: st == S_COMMIT -> goto s_commit
    :: st == S_CLEANUP -> goto s_cleanup
    :: st == S_ABORT -> goto s_abort
    fi
  }
handoff:
  atomic {        /* code: definition.ts HandOff (states:startExecution of the Standard workflow, retried), HandedOff */
    FORGET_HEAD;
    if
    :: faulty && cfaults < CFAULTS -> cfaults++                 /* the start failed: nothing was changed */
    :: true ->
       /* A fresh execution (no Name: a new execution id), Standard: no hand-off, exactly once. */
       assert(nextExec < NEXEC);
       if :: faulty -> running++ :: else -> skip fi;
       run Execution(nextExec, faulty, false); nextExec++
    fi;
    goto stopped
  }
stopped:
  atomic {
    cid = 0; att = 0; st = 0; p = 0; o = 0; s = 0; slot = 0; files = 0; ok = false; FORGET_HEAD; mine = 0; moved = false;
    sCommitted = 0; cut[0] = 0; cut[1] = 0; first = 0; last = 0; content = 0; merged = false; whole = 0;
    if :: faulty -> running-- :: else -> skip fi
  }
}

/* ══ time: leases lapse while their owner runs; a claim outlives its TTL ═════════════════════════════════ */
proctype Clock() {
  do
  :: atomic { lapses < LAPSES && hLive && IN_FLIGHT(hStatus) -> lapses++; hLive = false; lapsed[hOwner] = true }
  :: atomic { expiries < EXPIRIES && claimant != 0 && !claimExpired -> expiries++; claimExpired = true; ttlPassed = true }
  :: break
  od;
  running--
}

/* ══ the end-to-end property (docs/architecture.md) ══════════════════════════════════════════════════════ */
init {
  byte i; byte p; byte c; byte first; byte last; byte seen; int listed; short upTo[NP];
  byte k; byte whole; int listedMerged;
  atomic {
    rec[0].status = COMMITTED; rec[0].cut[0] = -1; rec[0].cut[1] = -1; rec[0].prev[0] = -1; rec[0].prev[1] = -1;
#if defined(PRESTAGED)
    /* Both partitions staged and acknowledged before the executions start (recovery races only). */
    fence[0] = NO - 1; fence[1] = NO - 1; acked[0] = true; acked[1] = true;
    i = 0;
    do :: i < NR -> entry[i] = 1; stagedCnt[i] = 1; i++ :: else -> break od;
    i = 0;
    running = 1 + EXECUTIONS + TWINS;
#elif defined(STAGERS)
    running = 3 + ZOMBIES + EXECUTIONS + TWINS;
    run Stager(0); run Stager(1);
#else
    running = 3 + ZOMBIES + EXECUTIONS + TWINS;
    run Processor(0, false); run Processor(1, false);
#endif
#if ZOMBIES > 0
    run Processor(0, true);
#endif
#if ZOMBIES > 1
    run Processor(1, true);
#endif
#if EXECUTIONS > 0
    run Execution(0, true, SCHEDULED_EXPRESS);
#endif
#if TWINS > 0
    run Execution(0, true, SCHEDULED_EXPRESS);             /* the same execution, run again at once */
#endif
#if EXECUTIONS > 1
    run Execution(1, true, SCHEDULED_EXPRESS);
#endif
#if EXECUTIONS > 2
    run Execution(2, true, SCHEDULED_EXPRESS);
#endif
    run Clock()
  }
  running == 0;
  /* Faults are over, every lease has passed: fault-free executions run until Begin finds nothing to commit
     (progress: every staged record is committed once faults stop). */
  atomic {
    hLive = false; i = 0;
    do :: i < NEXEC -> lapsed[i] = true; i++ :: else -> break od;
    i = FIRST_CLEAN
  }
  /* (_nr_pr == 1): the execution has ended, and so has the Standard one it handed off to, if any. */
  do
  :: i < FIRST_CLEAN + CLEAN_RUNS ->
     run Execution(i, false, SCHEDULED_EXPRESS); (_nr_pr == 1);
     if
     :: outcome[i] == R_EMPTY || (outcome[i] == R_HANDOFF && outcome[nextExec - 1] == R_EMPTY) -> break
     :: else -> i++
     fi
  :: else -> assert(false)                                   /* no fixpoint within the bounds */
  od;
  atomic {
    assert(acked[0] && acked[1]);
    assert(!IN_FLIGHT(hStatus));
    /* The committed output: manifests 1..committedId, gap-free, none beyond. */
    c = 1; seen = 0; listed = 0; listedMerged = 0; upTo[0] = -1; upTo[1] = -1;
    do
    :: c <= MAXCID ->
       assert(manifest[c] == (c <= hCommitted));
       if
       :: c <= hCommitted && manifestKey[c] == 0 ->          /* whole objects, one per partition range */
#ifndef PARTITION_LAYOUT
          assert(manifestFiles[c] == 0);                     /* (merged only: an empty plan, nothing listed) */
#else
          i = 0;
          do
          :: i < NSLOTS ->
             if
             :: manifestFiles[c] & BIT(i) ->
                /* each record exactly once: no file repeats another's record */
                assert((seen & finalObj[i]) == 0);
                seen = seen | finalObj[i];
                /* per partition in offset order */
                p = i / (NO * NO * NSALT); first = (i / (NO * NSALT)) % NO; last = (i / NSALT) % NO;
                assert(first > upTo[p] && first <= last); upTo[p] = last
             :: else -> skip
             fi;
             i++
          :: else -> break
          od;
          listed = listed | manifestFiles[c]
#endif
       :: c <= hCommitted && manifestKey[c] != 0 ->          /* slices of one merged object */
#ifndef MERGED_LAYOUT
          assert(false)
#else
          k = manifestKey[c];
          /* a merged object's slices are all listed by one manifest (as the reader's ListingCheck requires) */
          assert((listedMerged & BIT(k)) == 0);
          listedMerged = listedMerged | BIT(k);
          i = 0; whole = 0;
          do
          :: i < NSL ->
             if
             :: manifestFiles[c] & BIT(i) ->
                p = i / (NO * NO); first = (i / NO) % NO; last = i % NO;
                /* per partition in offset order */
                assert(first > upTo[p] && first <= last); upTo[p] = last;
                /* slices do not overlap: no slice repeats another's record */
                assert((whole & RANGE(p, first, last)) == 0);
                whole = whole | RANGE(p, first, last)
             :: else -> skip
             fi;
             i++
          :: else -> break
          od;
          /* and tile the object exactly: each slice's bytes (its SHA-256 in the manifest) are its range's records */
          assert(whole == mergedObj[k]);
          /* each record exactly once */
          assert((seen & whole) == 0);
          seen = seen | whole
#endif
       :: else -> skip
       fi;
       c++
    :: else -> break
    od;
    /* 3: nothing under the final prefix that no manifest lists */
#ifdef PARTITION_LAYOUT
    i = 0;
    do
    :: i < NSLOTS -> assert(finalObj[i] == 0 || (listed & BIT(i))); i++
    :: else -> break
    od;
#endif
#ifdef MERGED_LAYOUT
    k = 0;
    do
    :: k < NMKEYS -> assert(mergedObj[k] == 0 || (listedMerged & BIT(k))); k++
    :: else -> break
    od;
#endif
    /* 1: every record once after business-key dedupe; the unkeyed records all, the key K once (twice only
       after its claim outlived the TTL); the output is exactly what was staged (keyed state rides along). */
#if defined(STAGERS) || defined(PRESTAGED)
    assert(seen == 15);                                      /* no keys: every record */
#else
    assert((seen & BIT(REC(0, 1))) && (seen & BIT(REC(1, 1))));
    assert(seen & (BIT(REC(0, 0)) | BIT(REC(1, 0))));
    assert(ttlPassed || (seen & (BIT(REC(0, 0)) | BIT(REC(1, 0)))) != (BIT(REC(0, 0)) | BIT(REC(1, 0))));
#endif
    i = 0;
    do
    :: i < NR -> assert(stagedCnt[i] <= 1 && ((seen & BIT(i)) != 0) == (stagedCnt[i] == 1)); i++
    :: else -> break
    od
  }
}
