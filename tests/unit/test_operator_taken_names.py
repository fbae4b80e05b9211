"""A child's name held by somebody else's object: reported, then only read, never re-sent."""

from __future__ import annotations

from typing import Any

from distgnn_operator import status as s
from distgnn_operator.kube import ApiError
from distgnn_operator.reconcile import OperatorContext, Reconciler

OWNER = {"kind": "DistGNNJob", "name": "taken", "uid": "uid-1", "controller": True}


def _svc(refs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": "taken-server", "namespace": "ml"}
    if refs is not None:
        md["ownerReferences"] = refs
    return {"apiVersion": "v1", "kind": "Service", "metadata": md, "spec": {"clusterIP": "None"}}


class _Api:
    """The name ``taken-server`` holds ``holder`` (None: free); counts what is sent."""

    def __init__(self, holder: dict[str, Any] | None) -> None:
        self.holder = holder
        self.calls: list[str] = []

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("POST")
        if self.holder is not None:
            raise ApiError(409, "already exists")
        self.holder = obj
        return obj

    async def get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        self.calls.append("GET")
        return self.holder


def _noop(*_: str) -> None:
    return None


async def test_a_known_holder_is_read_and_the_create_not_sent_again() -> None:
    api = _Api(_svc())  # a user's own Service: no controller
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    want = [_svc([OWNER])]
    first = await rec.apply(want, {}, _noop)
    assert api.calls == ["POST", "GET"]
    assert "Service taken-server already exists and is controlled by nothing" in first.conflicts[0]
    for _ in range(3):  # passes where nothing changed: one read each, no POST
        api.calls.clear()
        again = await rec.apply(want, {}, _noop)
        assert api.calls == ["GET"] and again.conflicts == first.conflicts
    api.holder = None  # the user deletes it: the next pass creates ours
    api.calls.clear()
    done = await rec.apply(want, {}, _noop)
    assert api.calls == ["GET", "POST"] and done.changes == 1 and not done.conflicts


async def test_an_earlier_incarnations_child_is_waited_for_silently() -> None:
    earlier = {**OWNER, "uid": "uid-0"}  # same kind and name: garbage collection removes it
    api = _Api(_svc([earlier]))
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    want = [_svc([OWNER])]
    assert (await rec.apply(want, {}, _noop)).conflicts == []
    api.calls.clear()
    assert (await rec.apply(want, {}, _noop)).conflicts == []
    assert api.calls == ["GET"]


async def test_forget_drops_the_names_of_a_deleted_owner() -> None:
    api = _Api(_svc())
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    await rec.apply([_svc([OWNER])], {}, _noop)
    rec.forget(("DistGNNJob", "ml", "other"))
    api.calls.clear()
    await rec.apply([_svc([OWNER])], {}, _noop)
    assert api.calls == ["GET"]  # still known
    rec.forget(("DistGNNJob", "ml", "taken"))
    api.calls.clear()
    await rec.apply([_svc([OWNER])], {}, _noop)
    assert api.calls == ["POST", "GET"]  # forgotten: a new owner of the name tries again


def _owner_body(message: str) -> dict[str, Any]:
    cond = {"type": "Running", "status": "False", "reason": "ResourceExists", "message": message}
    return {
        "kind": "DistGNNJob",
        "metadata": {"name": "taken", "namespace": "ml", "uid": "uid-1"},
        "status": {"phase": "Pending", "conditions": [cond]},
    }


async def test_after_a_restart_the_status_says_which_names_are_taken() -> None:
    """A new operator process has no memory of the 409s; the status it wrote does: its
    first pass reads the holders and sends no create that would be refused again. Here a
    status as the operator before ``status.takenNames`` wrote it (a job held across the
    upgrade): the names are in its ResourceExists message."""
    api = _Api(_svc())
    first = await Reconciler(OperatorContext(api=api)).apply([_svc([OWNER])], {}, _noop)  # type: ignore[arg-type]
    other = "Secret taken-token already exists and is controlled by nothing, not by x"
    body = _owner_body("; ".join([other, *first.conflicts]))
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]  # restarted
    rec.recall_taken(body)
    api.calls.clear()
    again = await rec.apply([_svc([OWNER])], {}, _noop)
    assert api.calls == ["GET"] and again.conflicts == first.conflicts
    api.holder = None  # freed while the operator was down: created at once
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    rec.recall_taken(body)
    api.calls.clear()
    done = await rec.apply([_svc([OWNER])], {}, _noop)
    assert api.calls == ["GET", "POST"] and done.changes == 1


async def test_only_resource_exists_messages_are_read() -> None:
    api = _Api(None)
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    body = _owner_body("Service taken-server already exists and is controlled by nothing")
    body["status"]["conditions"][0]["reason"] = "ServersStarting"
    rec.recall_taken(body)
    await rec.apply([_svc([OWNER])], {}, _noop)
    assert api.calls == ["POST"]  # not read first


def _status_body(taken: list[dict[str, str]], message: str) -> dict[str, Any]:
    body = _owner_body(message)
    body["status"]["takenNames"] = taken
    return body


async def test_the_taken_names_come_from_the_status_field_not_the_message() -> None:
    """``status.takenNames`` is the record: a reworded message recalls the names all the
    same, and a message naming a child the field does not list recalls nothing."""
    api = _Api(_svc())
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    rec.recall_taken(_status_body([{"kind": "Service", "name": "taken-server"}], "reworded"))
    await rec.apply([_svc([OWNER])], {}, _noop)
    assert api.calls == ["GET"]  # read first, no create sent

    api = _Api(None)
    rec = Reconciler(OperatorContext(api=api))  # type: ignore[arg-type]
    legacy_words = "Service taken-server already exists and is controlled by nothing"
    body = _status_body([{"kind": "Secret", "name": "taken-token"}], legacy_words)
    rec.recall_taken(body)
    await rec.apply([_svc([OWNER])], {}, _noop)
    assert api.calls == ["POST"]  # the field does not list it: not read first


async def test_a_pass_reports_the_taken_names_it_found() -> None:
    api = _Api(_svc())
    done = await Reconciler(OperatorContext(api=api)).apply([_svc([OWNER])], {}, _noop)  # type: ignore[arg-type]
    assert done.taken == [("Service", "taken-server")]
    o = s.JobObservation(conflict="; ".join(done.conflicts), taken=tuple(done.taken))
    st = s.job_status(o, None, "t0")
    assert st["takenNames"] == [{"kind": "Service", "name": "taken-server"}]
    assert s.taken_names(st) == [("Service", "taken-server")]
    assert "takenNames" not in s.job_status(s.JobObservation(), st, "t1")  # freed: dropped
    gso = s.GraphServerObservation(conflict="x", taken=(("Service", "b"), ("Job", "a")))
    assert s.graphserver_status(gso, None, "t0")["takenNames"] == [
        {"kind": "Job", "name": "a"},
        {"kind": "Service", "name": "b"},
    ]
