"""The scoring pass's pure parts: units from stored rows, reading answers in every shape, the side file's
atomic parts and stale-row removal, the cost figures, and a gateway that drops the logprob fields."""

from __future__ import annotations

import asyncio
import base64

import httpx
import numpy as np
import orjson
import pyarrow.dataset as pads
import pytest

from synthgen.data import teacherfile
from synthgen.data.records import ResultRecord
from synthgen.data.teacherfile import TeacherRow, TeacherWriter
from synthgen.errors import RunLockedError, ServerError
from synthgen.server.client import SGLangClient
from synthgen.teacher import cost
from synthgen.teacher.answer import MissingLogprobs, payload, read_scores
from synthgen.teacher.scorer import ScoreConfig, Scorer
from synthgen.teacher.units import Unit, UnitCounts, record_units

IDS = [10, 11, 12, 13, 14]
TOP = [[[-0.1, 3, None], [-2.5, 4, None]], [[-0.2, 5, None], [-3.0, 6, None]]]


def nested_meta() -> dict:
    return {
        "input_token_logprobs": [[None, 12, None], [-0.7, 13, None], [-0.9, 14, None]],
        "input_top_logprobs": [None, *TOP],
    }


def test_the_request_scores_from_the_token_before_the_first_generated_one():
    body = payload(IDS, 3, 20, "b64")
    assert body["logprob_start_len"] == 2 and body["sampling_params"] == {"max_new_tokens": 0}
    assert body["return_flat_raw_top_logprobs"] and body["return_flat_raw_top_logprobs_b64"]
    assert "return_flat_raw_top_logprobs" not in payload(IDS, 3, 20, "nested")


def test_nested_flat_and_base64_answers_read_the_same():
    ids, values, token = read_scores(nested_meta(), IDS, 3)
    assert ids.tolist() == [[3, 4], [5, 6]] and token.tolist() == pytest.approx([-0.7, -0.9])
    flat = {
        "input_token_logprobs": nested_meta()["input_token_logprobs"],
        "input_top_logprobs_shape": [2, 2],
        "input_top_logprobs_null_prefix": 1,
        "input_top_logprobs_val_flat": [-0.1, -2.5, -0.2, -3.0],
        "input_top_logprobs_idx_flat": [3, 4, 5, 6],
    }
    b64 = {
        **{k: v for k, v in flat.items() if "flat" not in k},
        "input_top_logprobs_val_flat_b64": base64.b64encode(np.array([-0.1, -2.5, -0.2, -3.0], "<f4").tobytes()),
        "input_top_logprobs_idx_flat_b64": base64.b64encode(np.array([3, 4, 5, 6], "<i4").tobytes()),
    }
    for meta in (flat, b64):
        other = read_scores(meta, IDS, 3)
        assert other[0].tolist() == ids.tolist() and np.allclose(other[1], values)


def test_an_answer_for_other_tokens_or_without_top_logprobs_is_refused():
    with pytest.raises(ValueError, match="other tokens"):
        read_scores(nested_meta(), [10, 11, 12, 13, 99], 3)
    with pytest.raises(MissingLogprobs):
        read_scores({"input_token_logprobs": []}, IDS, 3)


def record(**changes) -> ResultRecord:
    row = {"id": "a", "dataset": "d", "input_ids": [1, 2, 3], "output_ids": [4, 5], **changes}
    return ResultRecord.from_dict(row)


def test_units_are_named_as_the_export_names_rows_and_turns_get_their_index():
    counts = UnitCounts()
    assert record_units(record(), counts) == [Unit("d/a", [1, 2, 3, 4, 5], 3)]
    assert record_units(record(sample=1), counts)[0].id == "d/a@s1"
    turns = [{"input_ids": [1], "output_ids": [2]}, {"input_ids": [1, 2, 3], "output_ids": [4]}]
    assert [u.id for u in record_units(record(turns=turns), counts)] == ["d/a#0", "d/a#1"]
    assert record_units(record(output_ids=None), counts) == [] and counts.no_ids == 1


def row(key: str, n: int = 2, k: int = 3) -> TeacherRow:
    return TeacherRow(key, list(range(5)), 5 - n, np.arange(n * k).reshape(n, k), -np.ones((n, k)), -np.ones(n))


def test_parts_read_as_one_table_and_a_stale_row_is_removed_before_its_new_score(tmp_path):
    folder = tmp_path / "d" / "teacher"
    writer = TeacherWriter(folder)
    with pytest.raises(RunLockedError):
        TeacherWriter(folder)
    for key in ("a", "b", "c"):
        writer.add(row(key))
        writer.flush()
    assert writer.drop({"b"}) == 1
    writer.add(row("b", n=1))
    writer.flush()
    writer.close()
    table = pads.dataset(folder, format="parquet").to_table().to_pylist()
    assert sorted(r["id"] for r in table) == ["a", "b", "c"]
    b = next(r for r in table if r["id"] == "b")
    assert b["start"] == 4 and b["topk_ids"] == [[0, 1, 2]]
    assert set(teacherfile.read_index(folder)) == {"a", "b", "c"}


def test_a_part_left_half_written_by_a_kill_is_cleared_and_never_read(tmp_path):
    folder = tmp_path / "teacher"
    folder.mkdir()
    (folder / ".part-000000.parquet.tmp").write_bytes(b"PAR1 torn")
    TeacherWriter(folder).close()
    assert not list(folder.glob(".part-*"))


def test_cost_counts_positions_prefill_and_k_times_8_bytes_a_position():
    c = cost.cost_of([Unit("a", [1, 2, 3, 4], 2), Unit("b", [1, 2], 1)], top_k=20)
    assert (c.rows, c.positions, c.prefill_tokens) == (2, 3, 6)
    assert c.side_bytes == 3 * (20 * 8 + 4) + 6 * 4


def test_a_gateway_that_drops_the_logprob_fields_stops_the_pass_with_one_line():
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=orjson.dumps({"text": "", "output_ids": [], "meta_info": {"id": "x"}}))

    async def go() -> None:
        scorer = Scorer(ScoreConfig(output_dir=None, urls=["http://gw"]))  # type: ignore[arg-type]
        await scorer.aclose()
        scorer.clients[:] = [SGLangClient("http://gw", None, 1, 10.0, transport=httpx.MockTransport(answer))]
        scorer._next = iter(scorer.clients * 2)
        with pytest.raises(ServerError, match="drops the logprob fields"):
            await scorer.score_unit(Unit("d/a", IDS, 3))
        await scorer.clients[0].aclose()

    asyncio.run(go())
