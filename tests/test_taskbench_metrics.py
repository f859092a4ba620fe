"""TaskBench's metrics (``hugginggpt/evaluation/metrics.py``) against counts made by hand on small
records, and the conversion of gold records and our plans into TaskBench graphs."""

from __future__ import annotations

import json

import pytest

from bot.errors import InputError
from hugginggpt.evaluation import toollist
from hugginggpt.evaluation.metrics import Counts, binary_counts, edit_distance, node_scores, step_rouge
from hugginggpt.evaluation.report import score
from hugginggpt.evaluation.taskbench import gold_graph, plan_graph
from pipeline.types import Task

HF = toollist.builtin("huggingface")


def _node(task, *arguments):
    return {"task": task, "arguments": list(arguments)}


def test_counts_compare_sets_and_sum_over_requests():
    c = Counts()
    c.add({"a", "b"}, {"a", "c", "c"})  # sets: tp a, fp c, fn b
    c.add(set(), set())
    c.add({"d"}, set())  # a refused plan: every gold item missed
    assert (c.tp, c.fp, c.fn) == (1, 1, 2)
    assert c.precision == pytest.approx(1 / 2) and c.recall == pytest.approx(1 / 3)
    assert c.f1 == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert Counts().f1 == 0.0 and Counts().precision == 0.0


def test_node_f1_micro_and_macro_over_all_tools_by_hand():
    tools = ["A", "B", "C", "D"]  # D never occurs: it still counts in the macro average
    pairs = [
        (["A", "B"], ["A", "B", "B"]),  # A tp, B tp (duplicates count once)
        (["A", "C"], ["A", "X"]),  # A tp, C fn; X is not a tool of the list: ignored
        (["Save File", "B"], ["C"]),  # B fn, C fp; "Save File" (a wrong gold tool) ignored
        (["C"], []),  # C fn (a refused plan)
    ]
    s = node_scores(pairs, tools)
    # micro: tp A,B,A = 3; fp C = 1; fn C,B,C = 3
    assert (s.micro.tp, s.micro.fp, s.micro.fn) == (3, 1, 3)
    assert s.micro.precision == pytest.approx(3 / 4) and s.micro.recall == pytest.approx(3 / 6)
    assert s.micro.f1 == pytest.approx(2 * 3 / (2 * 3 + 1 + 3))
    # per tool: A tp2 -> P1 R1 F1; B tp1 fn1 -> P1 R1/2 F2/3; C fp1 fn2 -> 0 0 0; D nothing -> 0 0 0
    p, r, f = s.macro()
    assert p == pytest.approx((1 + 1 + 0 + 0) / 4)
    assert r == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    assert f == pytest.approx((1 + 2 / 3 + 0 + 0) / 4)
    assert s.to_json()["macro"]["tools"] == 4


def test_edit_distance_on_sequences_of_different_lengths_by_hand():
    pairs = [
        ([1, 2, 3], [1, 2, 3]),  # identical: ratio 1
        ([1, 2, 3], [1, 3]),  # one deletion: indel 1, lengths 3 + 2 -> ratio 1 - 1/5 = 4/5
        ([4], [5, 4, 6, 7]),  # three insertions: indel 3, lengths 1 + 4 -> 1 - 3/5 = 2/5
        ([1, 2], [2, 1]),  # a swap is a deletion and an insertion: indel 2, lengths 4 -> 1/2
        ([3], []),  # a refused plan: indel 1, lengths 1 -> 0
        ([], []),  # both empty: ratio 1 (Levenshtein.ratio of two empty sequences)
    ]
    # mean ratio (1 + 4/5 + 2/5 + 1/2 + 0 + 1) / 6 = 3.7 / 6; reported as 1 - mean
    assert edit_distance(pairs) == pytest.approx(1 - 3.7 / 6)
    assert edit_distance([]) is None


def test_gold_and_predicted_graphs_give_t_and_v_items_with_file_names_and_node_references():
    gold = gold_graph(
        [_node("Image-to-Text", "example.jpg"), _node("Text-to-Speech", "<node-0>"),
         _node("Translation", "<node-2>"), _node("Sentence Similarity", "a cat", "<node-0>")],
        HF,
    )
    # <node-2> on node 2 is a self-reference: skipped; Image-to-Text's output type is text
    assert gold.links == (("Image-to-Text", "Text-to-Speech"), ("Image-to-Text", "Sentence Similarity"))
    assert gold.argument_names == ("Image-to-Text-image", "Text-to-Speech-text", "Sentence Similarity-text",
                                   "Sentence Similarity-text")
    assert gold.argument_values == (
        "Image-to-Text-image-example.jpg", "Text-to-Speech-text-Image-to-Text",
        "Sentence Similarity-text-a cat", "Sentence Similarity-text-Image-to-Text",
    )
    plan = [
        Task(0, "image-to-text", (), {"image": "image-1"}),
        Task(1, "text-to-speech", (0,), {"text": "<resource>-0"}),
        Task(2, "translation", (0,), {"text": "Say <resource>-0 in German", "tgt_lang": "German"}),
    ]
    predicted = plan_graph(plan, HF, {"image-1": "example.jpg"})
    # the resource id maps back to the file name; a reference inside text is a reference; tgt_lang
    # is a setting, not an argument
    assert predicted.argument_values == (
        "Image-to-Text-image-example.jpg", "Text-to-Speech-text-Image-to-Text", "Translation-text-Image-to-Text",
    )
    assert predicted.steps == ("Image-to-Text: example.jpg", "Text-to-Speech: the output of Image-to-Text",
                               "Translation: the output of Image-to-Text")
    # t-F1 sets: gold {I2T-image, TTS-text, SS-text}, predicted {I2T-image, TTS-text, Translation-text}
    # -> tp 2, fp 1, fn 1
    t = binary_counts([(gold.argument_names, predicted.argument_names)])
    assert (t.tp, t.fp, t.fn) == (2, 1, 1)
    # v-F1: gold 4 items, predicted 3; common I2T-image-example.jpg and TTS-text-Image-to-Text
    # -> tp 2, fp 1, fn 2, F1 = 4 / (4 + 1 + 2)
    v = binary_counts([(gold.argument_values, predicted.argument_values)])
    assert (v.tp, v.fp, v.fn) == (2, 1, 2) and v.f1 == pytest.approx(4 / 7)
    # links: gold {(I2T, TTS), (I2T, SS)}, predicted {(I2T, TTS), (I2T, Translation)} -> tp1 fp1 fn1
    link = binary_counts([(gold.links, predicted.links)])
    assert (link.tp, link.fp, link.fn) == (1, 1, 1)


def test_a_reference_to_a_tool_outside_the_list_is_named_other_and_sentence_similarity_none():
    g = gold_graph([_node("Save File", "x.txt"), _node("Summarization", "<node-0>"),
                    _node("Sentence Similarity", "a"), _node("Translation", "<node-2>")], HF)
    # tool_desc.json gives Sentence Similarity no output type: evaluate.py names it "none"
    assert g.argument_names == ("Save File-text", "Summarization-other", "Sentence Similarity-text", "Translation-none")


def test_step_rouge_by_hand():
    gold = "Step 1: Use Automatic Speech Recognition on example.wav"
    predicted = "Automatic Speech Recognition: example.wav"
    # tokens (lower case, punctuation dropped): gold 9 (step 1 use automatic speech recognition on
    # example wav), predicted 5, all 5 in gold -> ROUGE-1 P 5/5 R 5/9 F 10/14; bigrams: predicted 4,
    # gold 8, common 3 (automatic speech, speech recognition, example wav) -> F 6/12; LCS 5 -> = ROUGE-1
    r = step_rouge([(gold, predicted), ("a b", "")])  # an empty plan scores 0
    assert r["rouge1"] == pytest.approx((10 / 14 + 0) / 2)
    assert r["rouge2"] == pytest.approx((6 / 12 + 0) / 2)
    assert r["rougeL"] == pytest.approx((10 / 14 + 0) / 2)
    assert step_rouge([]) is None


def test_score_reports_rouge_only_over_requests_with_gold_steps():
    with_steps = gold_graph([_node("Text-to-Speech", "hello")], HF, ["Step 1: Text-to-Speech hello"])
    without = gold_graph([_node("Summarization", "long text")], HF)
    plan = plan_graph([Task(0, "text-to-speech", (), {"text": "hello"})], HF)
    s = score([(with_steps, plan), (without, plan)], HF)
    assert s["step_requests"] == 1
    # "text to speech hello" (4 tokens) in "step 1 text to speech hello" (6): F = 8/10
    assert s["rouge"]["rouge1"] == pytest.approx(0.8)
    assert score([(without, plan)], HF)["rouge"] is None


def test_builtin_tool_lists_and_bad_files(tmp_path):
    mm = toollist.builtin("multimedia")
    assert (HF.size, mm.size) == (23, 40)
    assert HF.index("Token Classification") == 1 and HF.index("Save File") == 0
    assert HF.output_of("Sentence Similarity") == "none" and HF.output_of("Save File") == "other"
    bad = tmp_path / "tool_desc.json"
    bad.write_text(json.dumps({"nodes": [{"id": "A"}]}))
    with pytest.raises(InputError) as e:
        toollist.from_file(bad)
    assert "is not TaskBench's tool_desc.json (tool 1 has no 'id' or no 'output-type' list)" in e.value.user_message
    with pytest.raises(InputError, match="does not exist"):
        toollist.from_file(tmp_path / "nowhere.json")
    good = tmp_path / "mine.json"
    good.write_text(json.dumps({"nodes": [{"id": "B", "output-type": ["image"]}, {"id": "A", "output-type": []}]}))
    mine = toollist.resolve(str(good))
    assert mine.ids == ("B", "A") and mine.index("A") == 2 and mine.output_of("A") == "none"


def test_the_warning_names_the_list_that_fits():
    gold = ["Video Search", "Image Colorizer", "Translation"]
    warning = toollist.suggestion(HF, gold)
    assert warning and "2 of 3 gold nodes" in warning and "--tools multimedia?" in warning
    assert toollist.suggestion(toollist.builtin("multimedia"), gold) is None


def test_our_tasks_take_the_multimedia_names_on_the_multimedia_list():
    mm = toollist.builtin("multimedia")
    plan = [Task(0, "automatic-speech-recognition", (), {"audio": "audio-1"}),
            Task(1, "summarization", (0,), {"text": "<resource>-0"}),
            Task(2, "object-detection", (), {"image": "image-1"})]
    g = plan_graph(plan, mm, {"audio-1": "example.wav", "image-1": "example.jpg"})
    # no multimedia tool detects objects: the Hugging Face name stays (not a tool of the list, not scored)
    assert g.nodes == ("Audio-to-Text", "Text Summarizer", "Object Detection")
    assert g.argument_values[1] == "Text Summarizer-text-Audio-to-Text"
    assert plan_graph(plan, HF).nodes == ("Automatic Speech Recognition", "Summarization", "Object Detection")
