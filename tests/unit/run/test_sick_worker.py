"""Garbage answers and the worker that writes them."""

from synthgen.run.sickworker import WorkerHealth, garbage_reason


def test_one_token_repeated_through_the_whole_answer_is_garbage():
    assert "repeated 40 times" in garbage_reason([7] * 40, "!" * 40)
    assert garbage_reason([7] * 40 + [2], "!" * 40, stop_ids=frozenset({2})) is not None  # stop token left out


def test_punctuation_repeated_or_text_that_is_not_text_is_garbage():
    assert "'!' repeated" in garbage_reason(None, "!" * 40)
    assert "not text" in garbage_reason(None, "\ufffd" * 40 + "ok")


def test_real_answers_are_not_garbage():
    answers = [
        ("4", [19]),
        ("Yes.", [5, 6]),
        ("| a | b |\n|---|---|\n| 1 | 2 |\n| 1 | 2 |\n| 1 | 2 |", list(range(30))),
        ("- item\n- item\n- item\n- item\n- item\n- item", [1, 2, 3] * 8),
        ("aaaaaaaaaaaaaaaaaaaaaaaa", list(range(3))),  # letters repeated: the loop guard's matter
        ("-" * 40, [9] * 5),  # a rule line of few tokens
        ("```python\nprint('héllo')\n```", list(range(12))),
    ]
    for text, ids in answers:
        assert garbage_reason(ids, text) is None, text


def test_a_short_answer_is_judged_only_when_its_worker_has_answered_garbage_before():
    assert garbage_reason([7] * 8, "!" * 8) is None  # from a worker never seen sick: too short to judge
    assert "repeated 8 times" in garbage_reason([7] * 8, "!" * 8, suspect=True)
    assert "'!' repeated 6" in garbage_reason(None, "!" * 6, suspect=True)
    answers = [("4", [19]), ("Yes.", [5, 6]), ("Paris", [40, 41]), ("1 2 3 4 5", list(range(9))), ("aaaa", [3] * 4)]
    for text, ids in answers:
        assert garbage_reason(ids, text, suspect=True) is None, text  # the shortest answers stay answers


def test_a_burst_of_garbage_from_one_worker_makes_it_sick_and_others_stay_well():
    health = WorkerHealth(burst=3, window=5)
    assert not health.record("w1", None)
    assert not health.record("w2", "x")
    assert not health.record("w1", "one token (id 7) repeated 40 times")
    assert not health.record("w1", None)
    assert not health.record("w1", "x")
    assert health.record("w1", "y")  # 3 of the last 5
    assert health.sick() == ["w1"]
    assert "w1 answered garbage 3 times in 5 answers (last: y)" in health.describe("w1")


def test_the_window_slides_so_rare_garbage_never_adds_up():
    health = WorkerHealth(burst=3, window=5)
    for i in range(100):
        assert not health.record("w", "x" if i % 5 == 0 else None)
    assert health.sick() == [] and health.garbage["w"] == 20
