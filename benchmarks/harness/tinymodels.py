"""Tiny random checkpoints for the expert server's tests and benchmark, built offline with the
libraries' own config classes and written into a Hugging Face cache in its real layout
(``models--org--name/{blobs,snapshots/<commit>,refs/main}``, as ``huggingface_hub`` writes it).

Some repositories get a ``README.md`` model card with a ``pipeline_tag``; the others have none, so
the server has to infer their task from ``config.json`` / ``model_index.json``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

WORDS = ("the a cat dog sat on mat is red blue green what who where when paris london city capital of in "
         "photo picture and to was big small happy sad good bad").split()
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "<s>", "</s>"]
VOCAB_SIZE = len(SPECIAL) + len(WORDS)
"""Tokens of :func:`word_tokenizer`: the vocabulary of every text model built here."""


def labelled(labels) -> dict:
    """A config's keyword arguments naming its classes ``labels`` (``id2label`` and ``label2id``)."""
    return {"id2label": dict(enumerate(labels)), "label2id": {x: i for i, x in enumerate(labels)}}


def write_repo(cache: Path, repo_id: str, folder: Path, card_tag: str | None = None) -> Path:
    """Copy ``folder`` into ``cache`` as the repository ``repo_id`` in huggingface_hub's layout
    (content-addressed blobs, a snapshot of symlinks, ``refs/main``); with ``card_tag``, add a
    ``README.md`` whose front matter has that ``pipeline_tag``. Returns the snapshot directory."""
    if card_tag:
        (folder / "README.md").write_text(f"---\npipeline_tag: {card_tag}\nlicense: mit\n---\n# {repo_id}\n\nA tiny random test model.\n")
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snap / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


def word_tokenizer(model_max_length: int = 64):
    """A WordLevel tokenizer over :data:`WORDS` with BERT's special tokens and pair template, as a
    ``PreTrainedTokenizerFast`` (no download)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]", bos_token="<s>", eos_token="</s>",
                                   model_max_length=model_max_length)


def _bert_cfg(**kw):
    from transformers import BertConfig

    return BertConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64, **kw)


def _save(model, out: Path, *extra) -> None:
    model.save_pretrained(out)
    for e in extra:
        e.save_pretrained(out)


def bert(kind: str) -> Callable[[Path], None]:
    """A tiny BERT of ``kind`` (a transformers class name) with the word tokenizer."""
    def build(out: Path) -> None:
        import transformers

        labels = {"BertForSequenceClassification": ["negative", "positive"],
                  "BertForTokenClassification": ["O", "B-LOC", "I-LOC", "B-PER"]}.get(kind)
        kw = labelled(labels) if labels else {}
        _save(getattr(transformers, kind)(_bert_cfg(**kw)), out, word_tokenizer())
    return build


def gpt2(out: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = word_tokenizer()
    cfg = GPT2Config(vocab_size=VOCAB_SIZE, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    _save(GPT2LMHeadModel(cfg), out, tok)


def t5(out: Path) -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    tok = word_tokenizer()
    cfg = T5Config(vocab_size=VOCAB_SIZE, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                   decoder_start_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    _save(T5ForConditionalGeneration(cfg), out, tok)


def vit(out: Path, labels=("cat", "dog", "rocket", "coffee"), layers: int = 2, hidden: int = 32) -> None:
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                    intermediate_size=hidden * 2, **labelled(labels))
    _save(ViTForImageClassification(cfg), out, ViTImageProcessor(size={"height": 32, "width": 32}))


def detr(out: Path) -> None:
    from transformers import DetrConfig, DetrForObjectDetection, DetrImageProcessor, ResNetConfig

    backbone = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"])
    cfg = DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False, d_model=32,
                     encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                     encoder_ffn_dim=32, decoder_ffn_dim=32, num_queries=5, **labelled(["cat", "dog"]))
    _save(DetrForObjectDetection(cfg), out, DetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 64}))


def dpt(out: Path) -> None:
    from transformers import DPTConfig, DPTForDepthEstimation, DPTImageProcessor

    cfg = DPTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                    intermediate_size=64, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 16, 16, 16],
                    fusion_hidden_size=16, reassemble_factors=[4, 2, 1, 0.5], head_in_index=-1)
    _save(DPTForDepthEstimation(cfg), out, DPTImageProcessor(size={"height": 32, "width": 32}))


def segformer(out: Path) -> None:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor

    labels = ["sky", "ground", "cat"]
    cfg = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3],
                          strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2], decoder_hidden_size=16,
                          **labelled(labels))
    _save(SegformerForSemanticSegmentation(cfg), out, SegformerImageProcessor(size={"height": 32, "width": 32}))


def wav2vec2(kind: str) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        import json

        import transformers
        from transformers import Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor

        chars = ["<pad>", "<s>", "</s>", "<unk>", "|"] + list("abcdefghijklmnopqrstuvwxyz'")
        (out / "vocab.json").parent.mkdir(parents=True, exist_ok=True)
        labels = ["speech", "music", "silence"]
        cfg = Wav2Vec2Config(vocab_size=len(chars), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 4),
                             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, pad_token_id=0,
                             classifier_proj_size=16, **labelled(labels))
        model = getattr(transformers, kind)(cfg)
        fe = Wav2Vec2FeatureExtractor(sampling_rate=16000, return_attention_mask=True)
        if kind == "Wav2Vec2ForCTC":
            with tempfile.TemporaryDirectory() as d:
                (Path(d) / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(chars)}))
                tok = Wav2Vec2CTCTokenizer(str(Path(d) / "vocab.json"))
            _save(model, out, fe, tok)
        else:
            _save(model, out, fe)
    return build


def clip_tokenizer(out: Path):
    """A CLIP tokenizer over single characters (vocab and merges written here, no download)."""
    import json

    from transformers import CLIPTokenizer

    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-")
    vocab = {t: i for i, t in enumerate(["<|startoftext|>", "<|endoftext|>", "!"] + chars + [c + "</w>" for c in chars])}
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps(vocab))
    (out / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(out / "vocab.json"), str(out / "merges.txt"), model_max_length=16)
    (out / "vocab.json").unlink()
    (out / "merges.txt").unlink()
    return tok, len(vocab)


def _sd_parts(tmp: Path) -> dict:
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    tok, n = clip_tokenizer(tmp / "tok")
    unet = UNet2DConditionModel(block_out_channels=(8, 16), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
                                down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=16,
                                norm_num_groups=4, attention_head_dim=2)
    vae = AutoencoderKL(block_out_channels=[8, 16], in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2, norm_num_groups=4)
    text = CLIPTextModel(CLIPTextConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=16, intermediate_size=32,
                                        num_attention_heads=2, num_hidden_layers=2, vocab_size=n, max_position_embeddings=16))
    sched = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False)
    return {"unet": unet, "vae": vae, "text_encoder": text, "tokenizer": tok, "scheduler": sched}


def stable_diffusion(out: Path) -> None:
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline(**_sd_parts(out.parent / (out.name + "-tmp")), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(out)


def instruct_pix2pix(out: Path) -> None:
    """A tiny InstructPix2Pix (instruction edits): the Stable Diffusion parts with a UNet taking the
    image latents beside the noise (8 input channels)."""
    from diffusers import StableDiffusionInstructPix2PixPipeline, UNet2DConditionModel

    parts = _sd_parts(out.parent / (out.name + "-tmp"))
    parts["unet"] = UNet2DConditionModel(**{**parts["unet"].config, "in_channels": 8})
    StableDiffusionInstructPix2PixPipeline(**parts, safety_checker=None, feature_extractor=None,
                                           requires_safety_checker=False).save_pretrained(out)


def controlnet(out: Path) -> None:
    from diffusers import ControlNetModel

    ControlNetModel(block_out_channels=(8, 16), layers_per_block=1, in_channels=4, cross_attention_dim=16,
                    down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), conditioning_embedding_out_channels=(4, 8),
                    norm_num_groups=4, attention_head_dim=2).save_pretrained(out)


def hed_annotator(out: Path) -> None:
    """The ``ControlNetHED.pth`` of ``lllyasviel/Annotators``, random weights of controlnet_aux's own net."""
    import torch
    from controlnet_aux.hed import ControlNetHED_Apache2

    out.mkdir(parents=True, exist_ok=True)
    torch.save(ControlNetHED_Apache2().state_dict(), out / "ControlNetHED.pth")


# repo id → (builder, card pipeline_tag or None: inferred from the architecture)
REPOS: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "tiny/vit-classifier": (vit, "image-classification"),
    "tiny/bert-sentiment": (bert("BertForSequenceClassification"), None),
    "tiny/bert-ner": (bert("BertForTokenClassification"), "token-classification"),
    "tiny/bert-mlm": (bert("BertForMaskedLM"), None),
    "tiny/bert-squad": (bert("BertForQuestionAnswering"), "question-answering"),
    "tiny/bert-embed": (bert("BertModel"), "sentence-similarity"),
    "tiny/gpt2": (gpt2, None),
    "tiny/t5-summarize": (t5, "summarization"),
    "tiny/t5-translate": (t5, "translation"),
    "tiny/detr": (detr, None),
    "tiny/dpt-depth": (dpt, None),
    "tiny/segformer": (segformer, "image-segmentation"),
    "tiny/wav2vec2-asr": (wav2vec2("Wav2Vec2ForCTC"), None),
    "tiny/wav2vec2-audio-cls": (wav2vec2("Wav2Vec2ForSequenceClassification"), None),
    "tiny/stable-diffusion": (stable_diffusion, None),
    "tiny/sd-controlnet-canny": (controlnet, None),
    "lllyasviel/Annotators": (hed_annotator, None),
}


def build_cache(cache: Path, repos: dict | None = None) -> dict[str, Path]:
    """Write every repository of ``repos`` (default :data:`REPOS`) into the cache at ``cache``;
    returns repo id → snapshot directory."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repo_id, (builder, tag) in (repos or REPOS).items():
            folder = Path(tmp) / repo_id.replace("/", "--")
            folder.mkdir(parents=True)
            builder(folder)
            shutil.rmtree(folder.parent / (folder.name + "-tmp"), ignore_errors=True)
            out[repo_id] = write_repo(cache, repo_id, folder, tag)
    return out


def caption(out: Path) -> None:
    """A ViT encoder with a GPT-2 decoder (VisionEncoderDecoderModel), as vit-gpt2 captioners are."""
    from transformers import (GPT2Config, ViTConfig, ViTImageProcessor, VisionEncoderDecoderConfig,
                              VisionEncoderDecoderModel)

    tok = word_tokenizer()
    enc = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64)
    dec = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64, add_cross_attention=True,
                     is_decoder=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = tok.bos_token_id, tok.pad_token_id, tok.eos_token_id
    model = VisionEncoderDecoderModel(cfg)
    model.generation_config.decoder_start_token_id = tok.bos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    _save(model, out, tok, ViTImageProcessor(size={"height": 32, "width": 32}))


def vilt(out: Path) -> None:
    from transformers import ViltConfig, ViltForQuestionAnswering, ViltImageProcessor

    answers = ["yes", "no", "cat", "two"]
    cfg = ViltConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, image_size=32, patch_size=8, max_position_embeddings=64, num_images=1,
                     **labelled(answers))
    _save(ViltForQuestionAnswering(cfg), out, word_tokenizer(),
          ViltImageProcessor(size={"shortest_edge": 32}, size_divisor=8))


def vits(out: Path) -> None:
    import json

    from transformers import VitsConfig, VitsModel, VitsTokenizer

    chars = ["_"] + list(" abcdefghijklmnopqrstuvwxyz'.,")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(chars)}))
        tok = VitsTokenizer(str(Path(d) / "vocab.json"), add_blank=True, phonemize=False)
    cfg = VitsConfig(vocab_size=len(chars), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=32,
                     flow_size=8, spectrogram_bins=17, upsample_initial_channel=16, upsample_rates=[4, 4],
                     upsample_kernel_sizes=[8, 8], resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3]],
                     prior_encoder_num_flows=1, prior_encoder_num_wavenet_layers=1, posterior_encoder_num_wavenet_layers=1,
                     duration_predictor_num_flows=1, duration_predictor_filter_channels=16, depth_separable_num_layers=1,
                     sampling_rate=16000)
    _save(VitsModel(cfg), out, tok)


def nli(out: Path) -> None:
    bert("BertForSequenceClassification")(out)
    import json

    cfg = json.loads((out / "config.json").read_text())
    cfg["id2label"] = {"0": "entailment", "1": "neutral", "2": "contradiction"}
    cfg["label2id"] = {"entailment": 0, "neutral": 1, "contradiction": 2}
    from transformers import BertConfig, BertForSequenceClassification

    BertForSequenceClassification(BertConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)})).save_pretrained(out)


def text_to_video(out: Path, pipeline: str = "TextToVideoSDPipeline") -> None:
    """A tiny ModelScope text-to-video (``pipeline``: or its ``VideoToVideoSDPipeline``, which
    has the same parts and redraws a video)."""
    import diffusers
    from diffusers import UNet3DConditionModel

    parts = _sd_parts(out.parent / (out.name + "-tmp"))
    parts["unet"] = UNet3DConditionModel(block_out_channels=(8, 16), layers_per_block=1, sample_size=16, in_channels=4,
                                         out_channels=4, down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                                         up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"), cross_attention_dim=16,
                                         attention_head_dim=2, norm_num_groups=4)
    getattr(diffusers, pipeline)(**parts).save_pretrained(out)


def video_to_video(out: Path) -> None:
    text_to_video(out, "VideoToVideoSDPipeline")


REPOS.update({
    "tiny/vit-gpt2-caption": (caption, None),
    "tiny/vilt-vqa": (vilt, None),
    "tiny/vits-tts": (vits, None),
    "tiny/bert-nli": (nli, "zero-shot-classification"),
    "tiny/text-to-video": (text_to_video, None),
    "tiny/instruct-pix2pix": (instruct_pix2pix, "image-text-to-image"),
})


CHAT_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]


def chat_tokenizer(media: list[str]):
    """A WordLevel tokenizer over :data:`WORDS` with a chat model's turn tokens and the ``media``
    placeholder tokens (``<|AUDIO|>``...) as special tokens, as a ``PreTrainedTokenizerFast`` (no
    download); ``<|im_end|>`` ends a turn."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL + CHAT_TOKENS + media + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()  # words joined by spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="<|im_end|>",
                                   additional_special_tokens=CHAT_TOKENS + media, model_max_length=1024)


def chat_generation(model, tok) -> None:
    """Make a tiny chat model's greedy answers words: its turn end may not come first and no other
    special token may come at all (random weights would otherwise answer nothing, now and then)."""
    specials = [i for i in tok.all_special_ids if i != tok.eos_token_id]
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = tok.eos_token_id, tok.pad_token_id
    model.generation_config.suppress_tokens = specials
    model.generation_config.begin_suppress_tokens = [tok.eos_token_id]


def qwen2_audio(out: Path) -> None:
    """A tiny Qwen2-Audio (audio-text-to-text): a Whisper-style encoder reading 5 s of 16 mel bins
    and a one-layer Qwen2 decoder, with its processor (Whisper feature extractor, chat template)."""
    from transformers import (Qwen2AudioConfig, Qwen2AudioEncoderConfig, Qwen2AudioForConditionalGeneration,
                              Qwen2AudioProcessor, Qwen2Config, WhisperFeatureExtractor)

    tok = chat_tokenizer(["<|AUDIO|>", "<|audio_bos|>", "<|audio_eos|>"])
    frames = 500  # 5 s of 10 ms mel frames; the encoder's positions are half of them (its stride-2 conv)
    audio = Qwen2AudioEncoderConfig(num_mel_bins=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=32,
                                    d_model=16, max_source_positions=frames // 2)
    text = Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                       pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model = Qwen2AudioForConditionalGeneration(Qwen2AudioConfig(
        audio_config=audio, text_config=text, audio_token_index=tok.convert_tokens_to_ids("<|AUDIO|>")))
    chat_generation(model, tok)
    fe = WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, chunk_length=frames // 100)
    _save(model, out, Qwen2AudioProcessor(feature_extractor=fe, tokenizer=tok))


def ltx_image_to_video(out: Path) -> None:
    """A tiny LTX-Video image-to-video (image-text-to-video): a one-layer transformer, a small
    causal video VAE and a one-layer T5 encoder with the word tokenizer."""
    from diffusers import (AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXImageToVideoPipeline,
                           LTXVideoTransformer3DModel)
    from transformers import T5Config, T5EncoderModel

    tok = word_tokenizer()
    text = T5EncoderModel(T5Config(vocab_size=len(tok), d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                   pad_token_id=tok.pad_token_id))
    transformer = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1,
                                             num_attention_heads=4, attention_head_dim=8, cross_attention_dim=32,
                                             num_layers=1, caption_channels=32)
    vae = AutoencoderKLLTXVideo(
        in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
        decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 1, 1),
        spatio_temporal_scaling=(True, True, False, False), decoder_spatio_temporal_scaling=(True, True, False, False),
        decoder_inject_noise=(False,) * 5, upsample_residual=(False,) * 4, upsample_factor=(1,) * 4,
        timestep_conditioning=False, patch_size=1, patch_size_t=1, encoder_causal=True, decoder_causal=False)
    LTXImageToVideoPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text, tokenizer=tok,
                            transformer=transformer).save_pretrained(out)


REPOS.update({"tiny/video-to-video": (video_to_video, None), "tiny/ltx-image-to-video": (ltx_image_to_video, None)})
REPOS.update({"tiny/qwen2-audio": (qwen2_audio, "audio-text-to-text")})


QWEN_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for c in message['content'] %}{% if c['type'] == 'video' %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif c['type'] == 'image' %}<|vision_start|><|image_pad|>"
    "<|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""Qwen2-VL's chat template, cut to what the tests use: turns, images, videos and texts."""


def qwen2_vl(out: Path) -> None:
    """A tiny Qwen2-VL (video-text-to-text): a one-layer vision tower and Qwen2 decoder, frames
    resized to at most 56x56 pixels, with its processor (image and video processors, chat template)."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor, Qwen2VLProcessor
    from transformers import Qwen2VLVideoProcessor
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig, Qwen2VLVisionConfig

    media = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tok = chat_tokenizer(media)
    ids = {t: tok.convert_tokens_to_ids(t) for t in media}
    size = {"shortest_edge": 28 * 28, "longest_edge": 56 * 56}
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(size=size), tokenizer=tok,
                                 video_processor=Qwen2VLVideoProcessor(size=size, cap_pixels_per_frame=True),
                                 chat_template=QWEN_VL_TEMPLATE)
    text = Qwen2VLTextConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]})
    vision = Qwen2VLVisionConfig(depth=1, embed_dim=16, hidden_size=16, num_heads=2, mlp_ratio=2)
    model = Qwen2VLForConditionalGeneration(Qwen2VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"]))
    chat_generation(model, tok)
    _save(model, out, processor)


REPOS.update({"tiny/qwen2-vl": (qwen2_vl, "video-text-to-text")})
