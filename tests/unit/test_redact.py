"""Credentials out of every line printed or written: the shapes, matched only where a name starts
(which keeps the patterns linear on long lines: 50,000 letters took 3 s, a run of `ab_` 14 s, before)."""

from synthgen.redact import MASK, redact


def test_every_credential_shape_is_masked_where_a_name_starts():
    cases = {
        "git+https://user:pw@host/x": f"git+https://user:{MASK}@host/x",
        "see https://tok@host/path": f"see https://{MASK}@host/path",
        "x_api_key='abc123'": f"x_api_key='{MASK}'",
        '{"api_key": "abc123"}': f'{{"api_key": "{MASK}"}}',
        "ServerArgs(api_key='s3cret', port=1)": f"ServerArgs(api_key='{MASK}', port=1)",
        "--api-key s3cret --port 1": f"--api-key {MASK} --port 1",
        "HF_TOKEN=abc python x": f"HF_TOKEN={MASK} python x",
    }
    for text, expected in cases.items():
        assert redact(text) == expected, text


def test_a_name_inside_a_longer_word_is_not_taken_for_one():
    assert redact("monkey='banana'") == "monkey='banana'"  # "key" inside a word is no credential
    assert redact("a.b-c.d://x") == "a.b-c.d://x"
