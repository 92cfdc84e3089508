/*
 * Publishing committed checkpoints to an Iceberg table (shared/coordinator/publish/), as a Promela model checked
 * by SPIN. docs/model-checking.md explains the bounds, what is abstracted away and how each step maps to code.
 *
 * The checkpoint protocol is model/protocol.pml's: here it is only its outcome, checkpoints 1..NC becoming
 * COMMITTED in order, each with its data files. Every shared variable below is the table's metadata (behind one
 * catalog pointer with a version) or one DynamoDB item of the ledger; every `atomic` block that touches them is
 * ONE call (a catalog load, a compare-and-swap, a conditional put), named by a `code:` comment after the function
 * of shared/ that makes it. test/model/model-mapping.test.ts checks those names still exist in the code.
 *
 * Mutations (model/mutations.txt, the lines whose scenario starts with `publish`): each MUT_* macro weakens one
 * guard the code relies on; scripts/model-check.mjs requires SPIN to find a counterexample for each.
 */

/* ── bounds ────────────────────────────────────────────────────────────────────────────────────────────── */
#define NC 2                /* checkpoints committed, in order */
#ifndef CFAULTS
#define CFAULTS 1           /* publish step crashes, all executions together */
#endif
#ifndef ZOMBIES
#define ZOMBIES 1           /* a second invocation of checkpoint ZOMBIE_OF's publish step, alongside the first */
#endif
#ifndef ZOMBIE_OF
#define ZOMBIE_OF NC        /* the checkpoint whose publish step the zombie is */
#endif
#ifndef COMPACTIONS
#define COMPACTIONS 1       /* another writer's commits (compaction), at any time, after the faults too */
#endif
#ifndef EXPIRIES
#define EXPIRIES 1          /* snapshots expired by maintenance (never main's head) */
#endif
#ifndef ROLLBACKS
#define ROLLBACKS 0         /* operator rollbacks: main set back to an ancestor, or an older metadata file restored */
#endif
#ifndef INITIAL
#define INITIAL 0           /* 1: the table exists before the first publish, its main at another writer's snapshot */
#endif
#ifndef PROPERTY_LOSSES
#define PROPERTY_LOSSES 0   /* another writer's commit that drops the table's properties */
#endif

#define BIT(x) (1 << (x))
/* Snapshot slots: 0 none; k in 1..NC is checkpoint k's snapshot (its id is a function of (pipeline, k):
   snapshotIdOf()); the slots above are other writers' snapshots. */
#ifndef OLD_LEDGER
#define OLD_LEDGER 0        /* 1: the table outlived an old ledger of the same pipeline id (not with INITIAL) */
#endif
#define NSNAP (NC + COMPACTIONS + INITIAL + OLD_LEDGER + 1)
#define FOREIGN (NC + COMPACTIONS + 1)     /* the snapshot the table starts at (INITIAL) */
#define OLDSNAP (NC + COMPACTIONS + 1)     /* the old ledger's snapshot of its checkpoint 1 (OLD_LEDGER) */
#define OURS(s) ((s) >= 1 && (s) <= NC)
#define ALL (BIT(NC + 1) - 2)              /* the files of checkpoints 1..NC */
#define UP_TO(k) (BIT((k) + 1) - 2)        /* the files of checkpoints 1..k */

/* ── the table: its current metadata, swapped as a whole by the catalog ─────────────────────────────────── */
byte version;               /* the catalog's version token; 0: the table has no metadata yet */
byte head;                  /* main's head snapshot (refs.main) */
byte prop;                  /* eos.<pipeline>.published-checkpoint */
bool propOurs = true;       /* the incarnation beside it is this ledger's (false: an old ledger's, or none adopted) */
byte lastSeq;               /* last-sequence-number */
byte listed;                /* the snapshots the metadata lists (expiry removes them), bitmask of slots */
/* A snapshot, once written, never changes: its parent, sequence number and the data files live in it, as the
   checkpoints they came from (a compaction rewrites files: the same checkpoints' rows, other files). */
byte sParent[NSNAP]; byte sSeq[NSNAP]; byte sFiles[NSNAP];

/* ── the ledger (shared/ledger/table-snapshots.ts) ────────────────────────────────────────────────────────── */
bool recorded[NC + 1];      /* TABLESNAP#k: written once; its snapshot id is k's */
byte recSeq[NC + 1];        /* the sequence number it records */
byte mark; byte markSeq;    /* PUBLISHED: upTo and the sequence number of its snapshot */
byte committed;             /* checkpoints 1..committed are COMMITTED, with their manifests */

/* ── ghosts ───────────────────────────────────────────────────────────────────────────────────────────── */
byte swapped;               /* checkpoints whose snapshot some swap ever made main's head */
byte cfaults; byte compactions; byte expiries; byte rollbacks; byte losses;
byte running;               /* executions of the fault phase still running */
byte inFlight;              /* publish step invocations running */
bool finalDone; bool finalRefused;
byte expired;               /* snapshots expired so far: an older metadata file naming one cannot be restored */

#define HEAD_SEQ ((head != 0 && (listed & BIT(head))) -> sSeq[head] : 0)

/* code: mainHistory(): main's history from its head through the listed snapshots. `in`: it holds snapshot `t`;
   `cut`: it ends at a snapshot no longer listed (expired). */
inline walkMain(t) {
  w = head; in = false;
  do
  :: w != 0 && (listed & BIT(w)) -> in = in || (w == t); w = sParent[w]
  :: else -> break
  od;
  cut = (w != 0)
}

/* code: newestCheckpointInMain(): our snapshot nearest main's head, walking the listed snapshots (0: none); a walk
   that ends at the expired snapshot of checkpoint t - 1 meets it (its id is a function of the checkpoint) */
inline newestInMain(t) {
  w = head; newest = 0;
  do
  :: w != 0 && (listed & BIT(w)) && OURS(w) -> newest = w; break
  :: w != 0 && (listed & BIT(w)) && !OURS(w) -> w = sParent[w]
#ifndef MUT_PREVIOUS_UNRECOGNISED
  :: w != 0 && !(listed & BIT(w)) && w == (t) - 1 -> newest = w; break
#endif
  :: else -> break
  od
}

/* code: missingFromMain(): whether main does not hold our snapshot `t` (checkpoint t) of sequence number `tseq`:
   main's history is whole (not cut short) without it; or it is cut short at the expired snapshot t's own history
   ends at (main branches off below t); or main's head is below tseq; or main's history reaches an earlier
   checkpoint's snapshot first. */
inline missingFromMain(t, tseq) {
  walkMain(t);
  e = t;
  do
  :: e != 0 && (listed & BIT(e)) -> e = sParent[e]
  :: else -> break
  od;
#ifdef MUT_WHOLE_HISTORY_UNTRUSTED
  missing = !in && (listed & BIT(t)) && !cut;
#else
  missing = !in && !cut;
#endif
#ifndef MUT_CUT_BY_SEQUENCE
  missing = missing || (!in && (listed & BIT(t)) && cut && e == w);
#endif
  newestInMain(t);
#ifdef MUT_EXPIRED_BY_SEQUENCE
  missing = missing || (!in && HEAD_SEQ < tseq);
#else
  missing = missing || (!in && (HEAD_SEQ < tseq || (newest != 0 && newest < t)));
#endif
  e = 0; newest = 0
}

/* A refusal (IcebergTableRolledBackError) is right only when main, as loaded, lost the files of a checkpoint up to
   `k` that some swap put in: never on a table that holds everything (no false refusal). */
#define REFUSED(k) assert((swapped & ~sFiles[head] & UP_TO(k)) != 0); goto refused

/* A crash of the step at this point: Step Functions retries it, or it fails into Cleanup (the publish is left to
   a later one). The first statement of the atomic step that follows the point: it adds no interleaving. */
#define CRASH if :: faulty && cfaults < CFAULTS -> cfaults++; goto crashed :: true -> skip fi

#define SUMMARY 1
#define PROPERTY 2
#define HISTORY 3

/* ══ one invocation of the publish step (shared/coordinator/publish/publish.ts) ══════════════════════════════ */
proctype Publisher(byte target; bool faulty) {
  byte m; byte mSeq; byte id; byte lv; byte found; byte seq; byte prevSeq; bool saw; bool retry;
  byte w; byte e; bool in; bool cut; bool missing; byte newest;
start:
  atomic {    /* code: publishCheckpoint(): requireCommitted, then TableSnapshots.readMark */
    CRASH;
    assert(committed >= target);
    m = mark; mSeq = markSeq
  }
  atomic {    /* code: assertNotRolledBack(): the catalog's load, judged against the mark */
#ifndef MUT_NO_ROLLBACK_CHECK
    if
    :: m > 0 && version == 0 -> REFUSED(m)
    :: m > 0 && version != 0 ->
       missingFromMain(m, mSeq);
#ifdef MUT_PROPERTY_BELOW_MARK_REFUSES
       missing = missing || prop < m;
#endif
       if :: missing -> REFUSED(m) :: else -> skip fi
    :: else -> skip
    fi;
#endif
    id = m + 1; prevSeq = mSeq; w = 0; in = false; cut = false; missing = false
  }
next:
  if :: id > target -> goto done :: else -> skip fi;
  atomic {    /* code: TableSnapshots.read: recorded before, only the mark may lag */
    /* The append's first attempt swaps on a state loaded before this read (publishCheckpoint()'s load, or the
       previous checkpoint's commit): taken here, the latest it can be; the load below then only stands for it. */
    if :: recorded[id] -> seq = recSeq[id] :: else -> lv = version; goto load fi
  }
judgeRecorded:
  atomic {    /* code: assertNotRolledBack(): the catalog's load, judged against the record before the mark moves */
#ifndef MUT_MARK_LAG_UNJUDGED
    if
    :: version == 0 -> REFUSED(id)
    :: else -> missingFromMain(id, seq); if :: missing -> REFUSED(id) :: else -> skip fi
    fi;
#endif
    saw = (sFiles[head] & BIT(id)) != 0; w = 0; in = false; cut = false; missing = false;
    goto advance
  }
load:
  /* code: appendCheckpoint(): the catalog's load, judged first against the previous checkpoint's record (the
     judge publishOne() gives it: assertNotRolledBack()), then committedBefore(); and, when found,
     foundMissingFromMain() on the state loaded */
  atomic {
#ifndef MUT_LOAD_UNJUDGED
    if
    :: id > 1 && version == 0 -> REFUSED(id - 1)
    :: id > 1 && version != 0 -> missingFromMain(id - 1, prevSeq); if :: missing -> REFUSED(id - 1) :: else -> skip fi
    :: else -> skip
    fi;
#endif
    if :: retry -> lv = version :: else -> skip fi;
    saw = (sFiles[head] & BIT(id)) != 0; found = 0;
#ifndef MUT_NO_FOUND_IN_TABLE
    if
    :: version != 0 && (listed & BIT(id)) ->                 /* code: snapshotOfCheckpoint() */
       found = SUMMARY; seq = sSeq[id];
       walkMain(id);
       if :: in -> missing = false :: else -> missingFromMain(id, seq) fi
#ifdef MUT_LEDGER_UNCHECKED
    :: version != 0 && !(listed & BIT(id)) && prop >= id -> /* code: checkpointOfProperty() */
#else
    :: version != 0 && !(listed & BIT(id)) && prop >= id && propOurs -> /* code: checkpointOfProperty(), isOwnLedger() */
#endif
       found = PROPERTY; seq = HEAD_SEQ;
       newestInMain(id);                                     /* code: mainHistoryWhole() when it meets none */
#ifdef MUT_PROPERTY_TRUSTED
       missing = false;
#else
       missing = !(newest == 0 || newest > id) || (id > 1 && seq <= prevSeq);
#ifndef MUT_PROPERTY_WHOLE_HISTORY_UNTRUSTED
       missing = missing || (newest == 0 && w == 0);
#endif
#endif
    :: version != 0 && !(listed & BIT(id)) && (prop < id || !propOurs) ->  /* code: historyEndsAtCheckpoint() */
       walkMain(id);
#ifndef MUT_HISTORY_END_UNRECOGNISED
       if :: cut && w == id -> found = HISTORY; seq = HEAD_SEQ; missing = false :: else -> skip fi
#endif
    :: else -> skip
    fi;
#endif
    w = 0; in = false; cut = false; newest = 0;
    if
    :: found && missing -> REFUSED(id)
    :: found && !missing -> goto record
    :: else -> skip
    fi
  }
  /* code: appendCheckpoint(): after a conflict, the ledger's record of the checkpoint read again before the next
     swap (its `recorded` callback: TableSnapshots.read); recorded meanwhile, the append stops and markRecorded()
     judges a load made after the read, as for a record read before: only the mark moves */
  atomic {
#ifndef MUT_NO_RECORD_AFTER_CONFLICT
    if
    :: retry && recorded[id] -> seq = recSeq[id]; retry = false; goto judgeRecorded
    :: else -> skip
    fi
#else
    skip
#endif
  }
  /* code: appendCheckpoint(): nextMetadata() on the state loaded (the parent's manifests and the checkpoint's),
     then the catalog's compare-and-swap (FileCatalog.commit, S3TablesCatalog.commit, GlueCatalog.commit) */
  atomic {
    CRASH;                                                   /* before the swap */
    if
    :: version == lv && (listed & BIT(id)) -> goto failed    /* appendSnapshot(): the id is already listed */
    :: version == lv && !(listed & BIT(id)) ->
       assert((sFiles[head] & BIT(id)) == 0);                /* no checkpoint's files in main twice */
       /* nothing appended over a checkpoint the ledger records as published that main lost */
       assert(!(id > 1 && recorded[id - 1]) || (sFiles[head] & BIT(id - 1)));
       sParent[id] = head; lastSeq++; sSeq[id] = lastSeq; sFiles[id] = sFiles[head] | BIT(id);
       listed = listed | BIT(id); head = id; version++; swapped = swapped | BIT(id);
#ifndef MUT_NO_PROPERTY_IN_SWAP
       prop = id; propOurs = true;
#endif
       seq = lastSeq; saw = true
    :: version != lv ->                                      /* conflict: another writer moved the table */
#ifdef MUT_NO_REBASE
       goto failed
#else
       retry = true; goto load                               /* reload and rebase onto the new head */
#endif
    fi
  }
record:
  atomic {    /* code: TableSnapshots.record (attribute_not_exists: written once, the same snapshot id again ok) */
    CRASH;                                                   /* after the swap, before the record */
#ifndef MUT_NO_TABLESNAP_RECORD
    if
    :: !recorded[id] ->
       assert(saw);    /* the ledger records k only if the state that decided it held k's files in main */
       recorded[id] = true; recSeq[id] = seq
    :: else -> seq = recSeq[id]
    fi
#endif
  }
advance:
  atomic {    /* code: TableSnapshots.advanceMark (upTo = k - 1) */
    CRASH;                                                   /* after the record, before the mark */
    if
#ifdef MUT_MARK_UNCONDITIONAL
    :: true ->
#else
    :: mark == id - 1 ->
#endif
       assert(recorded[id]);                                 /* the mark never passes an unrecorded checkpoint */
       assert(saw);       /* ... nor one main did not hold in the state that decided it, in this invocation */
       assert(id == mark + 1);                               /* the mark only grows, by one */
       mark = id; markSeq = seq
    :: mark != id - 1 && mark >= id -> skip                  /* a retry, a concurrent publisher */
    :: mark < id - 1 -> goto failed                          /* TableSnapshotConflictError */
    fi;
    prevSeq = seq; id++; found = 0; seq = 0; lv = 0; saw = false; missing = false; retry = false
  }
  goto next;
crashed:
  atomic {
    m = 0; mSeq = 0; id = 0; lv = 0; found = 0; seq = 0; prevSeq = 0; saw = false; missing = false; retry = false;
    if
    :: goto start                                            /* Step Functions retries the step */
    :: goto stopped                                          /* it fails into Cleanup */
    fi
  }
failed:       /* an error: retried only while faults remain (a retry is a fault), else into Cleanup */
  atomic {
    m = 0; mSeq = 0; id = 0; lv = 0; found = 0; seq = 0; prevSeq = 0; saw = false; missing = false; retry = false;
    if
    :: faulty && cfaults < CFAULTS -> cfaults++; goto start
    :: else -> goto stopped
    fi
  }
refused:
  atomic { finalRefused = !faulty; goto stopped }
done:
  skip;
stopped:
  atomic {
    m = 0; mSeq = 0; id = 0; lv = 0; found = 0; seq = 0; prevSeq = 0; saw = false; missing = false; retry = false;
    inFlight--;
    if :: faulty -> running-- :: else -> finalDone = true fi
  }
}

/* ══ the checkpoint protocol's outcome: 1..NC COMMITTED in order; each execution's Publish follows its Commit ══ */
proctype Committer() {
  byte k = 1;
  do
  :: k <= NC ->
     atomic {
       committed = k;
       run Publisher(k, true); inFlight++;
#if ZOMBIES > 0
       if :: k == ZOMBIE_OF -> run Publisher(k, true); inFlight++ :: else -> skip fi;
#endif
       k++
     }
  :: else -> break
  od;
  running--
}

/* ══ other writers of the table ═══════════════════════════════════════════════════════════════════════════ */
proctype Maintenance() {
  byte w; byte s;
  do
  :: atomic {    /* a compaction: committed by compare-and-swap on main's head, the same rows in other files */
       compactions < COMPACTIONS && head != 0 ->
       s = NC + 1 + compactions; compactions++;
       sParent[s] = head; lastSeq++; sSeq[s] = lastSeq; sFiles[s] = sFiles[head];
       listed = listed | BIT(s); head = s; version++; s = 0
     }
  :: atomic {    /* expiry of one snapshot, never main's head */
       expiries < EXPIRIES && (listed & ~BIT(head)) != 0 ->
       w = 1;
       do
       :: w < NSNAP && (listed & BIT(w)) && w != head ->
          if :: listed = listed & ~BIT(w); expired = expired | BIT(w); break :: w++ fi
       :: w < NSNAP && !((listed & BIT(w)) && w != head) -> w++
       :: w >= NSNAP -> break
       od;
       expiries++; w = 0
     }
  :: atomic {    /* a writer that drops the table's properties */
       losses < PROPERTY_LOSSES && version != 0 -> losses++; prop = 0; version++
     }
  :: break
  od
}

#if ROLLBACKS > 0
/* An operator: main set back to a listed ancestor of its head, or an older metadata file made current again (one
   the operator kept, none of whose snapshots has been expired since). With ROLLBACK_BETWEEN_PUBLISHES, only while
   no publish step runs; with ROLLBACK_SET_MAIN_ONLY, only main set back (see docs/model-checking.md). */
#ifdef ROLLBACK_BETWEEN_PUBLISHES
#define OPERATOR_MAY (inFlight == 0)
#else
#define OPERATOR_MAY true
#endif
proctype Operator() {
  byte w; bool saved; byte svVersion; byte svHead; byte svProp; bool svPropOurs; byte svSeq; byte svListed;
  do
  :: atomic { !saved && version != 0 ->
       saved = true; svVersion = version; svHead = head; svProp = prop; svPropOurs = propOurs; svSeq = lastSeq; svListed = listed }
  :: atomic { rollbacks < ROLLBACKS && head != 0 && OPERATOR_MAY ->
       w = sParent[head];
       do
       :: w != 0 && (listed & BIT(w)) -> if :: head = w; version++; rollbacks++; break :: w = sParent[w] fi
       :: else -> break
       od;
       w = 0 }
#ifndef ROLLBACK_SET_MAIN_ONLY
  :: atomic { rollbacks < ROLLBACKS && saved && svVersion != version && (svListed & expired) == 0 && OPERATOR_MAY ->
       head = svHead; prop = svProp; propOurs = svPropOurs; lastSeq = svSeq; listed = svListed; version++; rollbacks++ }
#endif
  :: break
  od
}
#endif

/* ══ the properties, once the faults stop ═════════════════════════════════════════════════════════════════ */
init {
  byte k;
  atomic {
#if OLD_LEDGER > 0
    /* the old ledger's checkpoint 1 at main's head, its property naming 1 with the old incarnation beside it */
    version = 1; head = OLDSNAP; listed = BIT(OLDSNAP); lastSeq = 1; sSeq[OLDSNAP] = 1; prop = 1; propOurs = false;
#endif
#if INITIAL > 0
    version = 1; head = FOREIGN; listed = BIT(FOREIGN); lastSeq = 1; sSeq[FOREIGN] = 1;
#endif
    running = 1 + NC + ZOMBIES;
    run Committer();
    run Maintenance();
#if ROLLBACKS > 0
    run Operator();
#endif
  }
  running == 0;
  /* An idle execution after the faults (maintenance may still commit): Begin finds nothing to commit and, the
     mark behind the last committed checkpoint, answers publish; CatchUpPublish publishes it.
     code: idleAnswer() */
  atomic {
    if
    :: mark < committed -> run Publisher(committed, false); inFlight++
    :: else -> finalDone = true
    fi
  }
  finalDone;
  atomic {
    /* bounded progress: every COMMITTED checkpoint published once, unless publishing refused a table that lost one
       or an operator rolled it back (what is left to check then are the assertions in the steps) */
    if
    :: finalRefused || rollbacks > 0 -> skip
    :: else ->
       assert(mark == NC);
       k = 1;
       do
       :: k <= NC -> assert(recorded[k]); k++
       :: else -> break
       od;
       assert((sFiles[head] & ALL) == ALL)
    fi
  }
}
