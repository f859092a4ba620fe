"""Settings as an operator writes them: renamed keys still load, with a warning that names the new key."""

from __future__ import annotations

import logging

import pytest

from bot.errors import ConfigError
from bot.settings import load_settings


@pytest.mark.parametrize("written, need_mention", [("false", True), ("true", False)])
def test_the_old_slack_followup_key_loads_as_its_opposite_with_a_warning(tmp_path, caplog, written, need_mention):
    config = tmp_path / "hugginggpt.toml"
    config.write_text(f"[slack]\nfollowups_without_mention = {written}\n")
    with caplog.at_level(logging.WARNING, logger="hugginggpt.settings"):
        settings = load_settings(config, env={})
    assert settings.slack.followups_need_mention is need_mention
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning == (f"[slack] followups_without_mention in {config} is deprecated: write [slack] followups_need_mention"
                       f" = {str(need_mention).lower()} (its opposite) instead.")


def test_the_old_slack_followup_variable_loads_as_its_opposite(caplog):
    with caplog.at_level(logging.WARNING, logger="hugginggpt.settings"):
        settings = load_settings(None, env={"HUGGINGGPT_SLACK__FOLLOWUPS_WITHOUT_MENTION": "0"})
    assert settings.slack.followups_need_mention is True
    assert "HUGGINGGPT_SLACK__FOLLOWUPS_WITHOUT_MENTION is deprecated" in caplog.text


def test_the_new_key_and_a_bad_old_value():
    assert load_settings(None, env={"HUGGINGGPT_SLACK__FOLLOWUPS_NEED_MENTION": "true"}).slack.followups_need_mention
    with pytest.raises(ConfigError, match="HUGGINGGPT_SLACK__FOLLOWUPS_WITHOUT_MENTION is invalid: it takes true or false"):
        load_settings(None, env={"HUGGINGGPT_SLACK__FOLLOWUPS_WITHOUT_MENTION": "sometimes"})


def test_expert_server_keys_are_masked_in_logs():
    settings = load_settings(None, env={"HUGGINGGPT_INFERENCE__EXPERTS_URL": "http://gpu1:8081",
                                        "HUGGINGGPT_INFERENCE__EXPERTS_API_KEYS": '{"http://gpu1:8081": "expert-key-123456"}'})
    assert "expert-key-123456" in settings.secret_values()
