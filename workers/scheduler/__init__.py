"""The scheduler: which jobs run, when, in which batch, and who owns each batch meanwhile.

Celery moves the messages (queues, acks, retries, countdowns); this package decides what the
messages are about: a session's jobs one at a time and in order, jobs gathered into batches,
at most a few batches of a lane at once, and nothing lost when a worker dies. Its state lives
in Redis, changed by Lua scripts where two steps must not interleave (one ``.lua`` file each,
called by name through ``scripts``). The functions take a ``Scheduler`` (``core``): the state
behind its Protocols (``protocols``; kept in memory by ``memory`` for the unit tests), the
keeper, the settings, and a ``Sender`` for the messages, which Celery sends.

Glossary (the words the modules use, each for one thing):

- **line**: a session's jobs in the order they were accepted, a Redis list; only its head runs
  (``state_store``, ``turns``).
- **turn**: a job's right to run, which comes when it heads its line; one batch takes it per
  attempt.
- **hand-on**: a job that ends leaves its line and makes the job now at the head ready
  (``turns``); a run's owner hands the run on to its next phase (``leases``).
- **lane**: ``live`` or ``backfill`` (``Lane``): each has its own ready list, batch slots
  and queues, so a backfill never starves live traffic.
- **ready list**: the jobs of a lane whose turn has come, waiting for a gather.
- **gather**: the task that takes a batch of ready jobs (``take_batch``, which says what it
  found: ``Taken``) and sends its chain of phase tasks (``batches``).
- **slot**: one of the ``batches_in_flight`` batches of a lane that may run at once.
- **run**: one trip down the phases by a batch (its id is the gather's task id), by a job sent
  on alone, or by a wave; it has a record in Redis with its phase, jobs, lane and owner.
- **lease**: a run's deadline in the ``leases`` sorted set; its owner's process renews it, and
  a run whose lease passed has lost its owner (``leases``).
- **claim**: a task taking a run's phase under an execution token, if nobody else owns it.
- **keeper**: the thread of each worker process that renews its leases, gives up those of a
  task over its time limit, and runs the reaper in turn (``keeper``).
- **reaper**: what recovers runs whose lease lapsed and lines whose head nothing runs
  (``reaper``).
- **wave**: the jobs of a batch whose LLM calls returned early, sent on as a run of their own
  while the batch waits for its slowest call (``waves``).
- **embed-ahead**: the next job of each session in a live batch has its new turn embedded
  while the batch runs, so its retrieval finds the vector (``batches.embed_ahead``).
"""
