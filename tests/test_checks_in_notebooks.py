"""What a check cell tells a student that the grader would otherwise tell them too late: a
function that changes its inputs in place, or that calls forbidden code, fails there as it
fails in the grader, and says that the grader gives 0 for it; and the public cases keep the
promises of the task texts, so that a mistake the text warns about shows publicly.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from checks_support import check_output, run_task
from test_checks_01 import count_ngrams_alt
from test_checks_02 import gru_layer
from test_checks_03 import general_attention
from test_checks_04 import causal_self_attention, local_mask
from test_checks_07 import sample

from coursepkg import checks, course
from coursepkg.checks import core

CHECKS = Path(checks.__file__).parent


# ---------------------------------------------------------------------------------------------
# Inputs are sacred
# ---------------------------------------------------------------------------------------------


def head_scales_w_q_in_place(x, w_q, w_k, w_v):
    """Folds the division by sqrt(d_k) into the query weights: the right numbers, but the
    caller's w_q is changed."""
    w_q /= math.sqrt(w_q.shape[0])
    return causal_self_attention(x, w_q * math.sqrt(w_q.shape[0]), w_k, w_v)


def test_scaling_a_weight_in_place_loses_every_point():
    result = run_task("4.3", head_scales_w_q_in_place, hidden=True)
    assert result.points == 0 and {case.status for case in result.cases} == {"failed"}
    public = [case for case in result.cases if not case.hidden]
    assert all(case.message.startswith("Your function changed its input w_q in place")
               for case in public)
    assert all(case.message.endswith("The grader gives 0 for this.") for case in result.cases)


def test_the_private_copy_keeps_the_inputs_aliasing():
    x = torch.randn(2, 3)
    args = (x, x, x.T, [x])
    copy = core._private_copy(args)
    assert copy[0] is copy[1] is copy[3][0] and copy[0] is not x
    assert copy[2].data_ptr() == copy[0].data_ptr()  # the transposed view stays a view of it
    generator = torch.Generator().manual_seed(1)
    assert core._private_copy((generator,))[0] is generator


def test_a_changed_input_is_named_by_the_function_s_own_parameter_name():
    def run_gru(x, h_start, weight_ih, weight_hh, bias_ih, bias_hh):
        outputs, h = gru_layer(x, h_start, weight_ih, weight_hh, bias_ih, bias_hh)
        h_start.copy_(h)  # "keep the state for the next chunk"
        return outputs, h

    result = run_task("2.2", run_gru, hidden=True)
    assert result.points == 0
    assert result.cases[0].message.startswith("Your function changed its input h_start in place")
    assert result.cases[-1].message == core._HIDDEN_INPUT_CHANGED


def test_padding_the_caller_s_sentences_loses_points():
    def count_ngrams(sentences, n):
        for sentence in sentences:
            sentence[:0] = ["<s>"] * (n - 1)
            sentence.append("</s>")
        return count_ngrams_alt([sentence[n - 1:-1] for sentence in sentences], n)

    result = run_task("1.1", count_ngrams, hidden=True)
    assert result.points == 0
    assert result.cases[0].message.startswith("Your function changed its input sentences[0] ")


def test_zeroing_the_prompt_loses_points():
    def sampler(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None,
                generator=None):
        out = sample(model, idx, max_new_tokens, block_size, temperature, top_k, generator)
        idx.zero_()
        return out

    result = run_task("7.4", sampler)
    assert result.points == 0
    assert all(case.message.startswith("Your function changed its input idx in place")
               for case in result.cases)


def test_a_module_changed_in_place_is_named_with_its_parameter():
    def encoder_block(x, self_attn, ff, norm1, norm2, norm_first=False, mask=None):
        with torch.no_grad():
            norm2.weight.fill_(1.0)
        if norm_first:
            h = norm1(x)
            x = x + self_attn(h, h, h, mask)[0]
            return x + ff(norm2(x))
        x = norm1(x + self_attn(x, x, x, mask)[0])
        return norm2(x + ff(x))

    message = run_task("7.2", encoder_block).cases[0].message
    assert message.startswith("Your function changed its input norm2.weight in place")


def test_drawing_from_the_generator_given_is_no_change_of_an_input():
    assert run_task("7.4", sample, hidden=True).status == "passed"


def test_check_prints_the_changed_input(capsys):
    out = check_output(capsys, "4.3", head_scales_w_q_in_place)
    assert out.startswith("Task 4.3 causal_self_attention: 0/3 points\n")
    assert "  FAIL  [0/1] 2 sequences of 5; D = 6, Dk = Dv = 4: Your function changed " \
           "its input w_q in place" in out
    assert out.count("The grader gives 0 for this.") == 3


# ---------------------------------------------------------------------------------------------
# Forbidden calls fail in the check cell as they fail in the grader
# ---------------------------------------------------------------------------------------------


def head_with_torch(x, w_q, w_k, w_v):
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out, causal_self_attention(x, w_q, w_k, w_v)[1]


def test_a_forbidden_call_fails_the_check_cell_with_the_grader_s_message(capsys):
    out = check_output(capsys, "4.3", head_with_torch)
    lines = out.splitlines()
    assert lines[0] == "Task 4.3 causal_self_attention: 0/3 points"
    assert all(line.startswith("  FAIL  [0/1] ") and "forbidden: you called torch.nn."
               "functional.scaled_dot_product_attention" in line and "the grader gives 0" in line
               for line in lines[1:-1]), out


def test_a_function_that_is_itself_forbidden_fails_every_case():
    from coursepkg import rnn

    result = run_task("2.1", rnn.ElmanRNN.forward)
    assert result.points == 0
    assert all(case.message.startswith("forbidden: you called coursepkg.rnn")
               for case in result.cases)


def test_the_check_cell_and_the_grader_say_the_same():
    from coursepkg.checks.forbidden import forbidden_message

    task = checks.get_task("4.3")
    result = checks.evaluate_case(task, task.cases[0], head_with_torch,
                                  tripwire=checks.tripwire_for(task))
    assert result == checks.forbidden_result(task.cases[0], "torch.nn.functional."
                                             "scaled_dot_product_attention")
    assert result.message == forbidden_message(
        "torch.nn.functional.scaled_dot_product_attention")


# ---------------------------------------------------------------------------------------------
# The public cases keep the task texts' promises
# ---------------------------------------------------------------------------------------------


def local_mask_from_lengths(keep, window):
    """Right for right padding only: a length per sequence."""
    lengths = keep.sum(dim=1, keepdim=True)
    return local_mask(torch.arange(keep.shape[1])[None, :] < lengths, window)


def test_padding_anywhere_is_tested_in_public():
    """Task 4.2 says padding may be at the end, at the start or anywhere: a public case is
    left-padded, so a mask built from lengths shows publicly."""
    task = checks.get_task("4.2")
    assert any(not row[0] and row[-1] for case in task.cases for row in case.args["keep"])
    result = run_task("4.2", local_mask_from_lengths)
    assert result.points < result.max_points


def test_the_chapters_own_aliased_calls_are_public_cases():
    """Chapter 3 calls attention as attend(query, keys, keys), chapter 5's heads attend from a
    sequence to itself, head_weights(x, x, ...): each has a public case that passes one tensor
    several times."""
    attend = checks.get_task("3.1")
    _, keys, values, _, _ = attend.build_args(attend.cases[1].args)
    assert keys is values
    heads = checks.get_task("5.1")
    assert any(args[0] is args[1]
               for args in (heads.build_args(case.args) for case in heads.cases))
    # scaling the keys in place there changes the values too
    def scale_keys(query, keys, values, mask, w):
        keys *= 0.5
        return general_attention(query, keys, values, mask, 2.0 * w)

    assert run_task("3.1", scale_keys).cases[1].status == "failed"


def test_an_empty_sentence_and_a_unigram_context_are_public():
    assert any([] in case.args["sentences"] for case in checks.get_task("1.1").cases)
    assert any(case.args["context"] == [] for case in checks.get_task("1.2").cases)

    def count_skipping_empty(sentences, n):
        return count_ngrams_alt([s for s in sentences if s], n)

    assert run_task("1.1", count_skipping_empty).status == "partial"


# ---------------------------------------------------------------------------------------------
# The checks engine
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chapter", course.CHAPTERS, ids=lambda chapter: chapter.stem)
def test_no_chapter_module_imports_another(chapter):
    path = CHECKS / f"{chapter.checks_module.rsplit('.', 1)[1]}.py"
    chapter_modules = {ch.checks_module for ch in course.CHAPTERS}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            names = {alias.name for alias in node.names}
        else:
            continue
        assert not names & chapter_modules, (path.name, names & chapter_modules)


def test_the_checks_import_every_chapter_of_the_course():
    assert {task.assignment for task in checks.TASKS.values()} == {
        chapter.stem for chapter in course.CHAPTERS}
    source = (CHECKS / "__init__.py").read_text()
    assert "CHAPTERS" in source and "ch01_ngrams" not in source
