"""A frame's fields are listed once (:class:`~flyviz.record.frame.Frame`); a recording keeps
every one of them but the full next-token distribution, and gives them back unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np

from flyviz.record.frame import STORED_FIELDS, Frame
from flyviz.record.recording import FrameInfo, Recording


def test_the_recordings_storage_record_holds_exactly_the_stored_fields():
    stored = {f.name for f in dataclasses.fields(FrameInfo)}
    assert stored == set(STORED_FIELDS) | {"text_keep", "text_tail"}
    assert set(STORED_FIELDS) | {"state", "text_so_far", "probabilities"} == \
        {f.name for f in dataclasses.fields(Frame)}


def test_every_stored_field_comes_back_from_memory_and_from_a_file(tmp_path):
    rng = np.random.default_rng(1)
    frames = [Frame(position=i, phase="prompt" if i < 2 else "generation", input_token_id=10 + i,
                    input_text=f"w{i}", predicted_token_id=20 + i, predicted_text=f"p{i}",
                    probability=0.25 + 0.1 * i, top_k_ids=np.array([20 + i, 3], np.int32),
                    top_k_probabilities=np.array([0.25 + 0.1 * i, 0.1], np.float32),
                    top_k_text=(f"p{i}", "q"), state=rng.standard_normal(8).astype(np.float32),
                    mean_abs_state=0.5 + i, text_so_far="" if i < 2 else "p" * i,
                    generation_index=None if i < 2 else i - 2) for i in range(4)]
    rec = Recording(8, states_dtype="float32")
    for frame in frames:
        rec.append(frame)
    again = Recording.load(rec.save(tmp_path / "fields.flyrec"))
    for source in (rec, again):
        for original, back in zip(frames, source):
            for name in (*STORED_FIELDS, "text_so_far", "state"):
                mine, theirs = getattr(original, name), getattr(back, name)
                if isinstance(mine, np.ndarray):
                    np.testing.assert_array_equal(mine, theirs)
                else:
                    assert mine == theirs, (name, mine, theirs)


def test_the_file_format_stores_each_stored_field_once_as_a_tensor_or_in_the_frame_entry():
    from flyviz.record.flyrec_codec import _FRAME_TENSORS, ENTRY_KEYS

    tensors, entry = set(_FRAME_TENSORS), set(ENTRY_KEYS) - {"text_keep", "text_tail"}
    assert not tensors & entry
    assert tensors | entry == set(STORED_FIELDS)
    # The entry's keys are the documented ones, in the documented order.
    assert ENTRY_KEYS == ("phase", "input_text", "predicted_text", "top_k_text", "text_keep",
                          "text_tail", "generation_index")
