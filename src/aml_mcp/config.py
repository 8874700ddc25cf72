"""Settings: embedded defaults, overridden by an optional TOML file, then by `AML_MCP_*` variables.

Precedence, lowest first: defaults < `--config FILE` (TOML) < environment < command-line flags.
Nested groups use `__` in variable names, e.g. `AML_MCP_AUTH__ENABLED=false`.

Each feature owns its settings group (`tasks/settings.py`, `auth/settings.py`, ...); this module
only composes them, so no feature has to import another's settings.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from aml_mcp.aml.settings import AmlSettings
from aml_mcp.auth.settings import ResourceServerSettings
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.http.settings import HttpSettings
from aml_mcp.lab.settings import LabSettings
from aml_mcp.loopback import is_loopback_host
from aml_mcp.subscriptions.settings import ListenSettings
from aml_mcp.tasks.settings import TaskSettings

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


class AuthSettings(ResourceServerSettings):
    """The `auth` group: the resource server's settings, plus the development authorization server.

    The two are separate features (the resource server never imports the dev issuer); they share
    one group so that `AML_MCP_AUTH__DEV__*` reads as what it is, a part of authentication.
    """

    dev: DevAuthSettings = Field(default_factory=DevAuthSettings)
    """The embedded development authorization server (`AML_MCP_AUTH__DEV__*`)."""


SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")


class Settings(BaseSettings):
    """Everything the composition root needs to build the server."""

    model_config = SettingsConfigDict(
        env_prefix="AML_MCP_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
        use_attribute_docstrings=True,
    )

    host: str = "127.0.0.1"
    """Interface to bind (`--host`). Anything but loopback needs authentication on, and the development
    authorization server and the lab's simulation off: `serve` refuses to start otherwise (the same
    holds for a `public_url` whose host is not loopback)."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port to listen on (`--port`)."""
    data_dir: Path = Path("var")
    """Holds everything the server persists (`--data-dir`): databases, audit file, keys; created if
    missing. The commands that work on a server's data (`token`, `revoke`, `ingest`, ...) take the same."""
    database_url: str | None = None
    """Shared PostgreSQL database (`postgresql://user@host:port/db`) for state several server
    processes share: so far the tasks and the event bus of listen streams (see docs/scale-out.md).
    Give the password by `PGPASSWORD` or `~/.pgpass`, not in the URL.

    Default: none, everything stays in SQLite in the data dir (one process)."""
    database_schema: str | None = None
    """PostgreSQL schema the shared tables live in (created if missing). Lets one database hold
    several isolated deployments.

    Default: none, the database user's `search_path` decides (normally `public`)."""
    database_pool_size: int = Field(default=4, gt=0, le=1000)
    """Most connections of this process's main pool to `database_url` (tasks, events, revocations,
    baselines); a request waits at most a second for one, then is refused as retryable (503 with
    `Retry-After`). Besides it a process holds one listener connection, and when it uses them the
    audit writer's (1), the case notes' (2) and the development issuer's (2): `aml-mcp cluster`
    prints the sum, and docs/scale-out.md ("Connection budget") gives the formula. Keep replicas x
    (pool + 6) + workers x (pool + 5) below the server's `max_connections`."""
    role: Literal["all", "api"] = "all"
    """What this process does (`--role`): `all` answers requests and runs task bodies; `api` answers
    requests only and leaves every task it creates for `aml-mcp worker` processes, which claim them
    from `database_url` (needed for `api`: a task nobody shares would never run).

    Default: `all`."""
    metrics_host: str = "127.0.0.1"
    """Interface the metrics listener binds (`--metrics-host`). The metrics show which tools are used
    and how much: keep it on loopback, or on an interface only the scraper reaches."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Port of the metrics listener (`--metrics-port`): `/metrics` in the Prometheus text format, on
    a socket of its own beside the public one (the public port has no `/metrics`, so nothing behind
    a balancer reaches it). 0 picks a free port.

    Default: none, no metrics listener."""
    public_url: str | None = None
    """This server's canonical MCP endpoint URI (the RFC 8707 resource): the audience every token must
    carry. Set it when clients reach the server under another name than HOST:PORT (a proxy, a DNS name).

    Default: `http://HOST:PORT/mcp`, from `host` and `port`.
    """
    allowed_hosts: list[str] = Field(default_factory=list)
    """Extra `Host` header values accepted besides loopback and the public URL's (`"name:*"` allows any
    port). A JSON list in the environment."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Extra `Origin` values accepted besides loopback and the public URL's (`"http://name:*"` allows any
    port). A JSON list in the environment."""
    dns_rebinding_protection: bool = True
    """Refuse requests whose `Host` (HTTP 421) or `Origin` (HTTP 403) is not allowed, on every route, so a
    web page whose name resolves to this machine cannot drive the server."""
    max_body_bytes: int = Field(default=1 * MIB, gt=0)
    """Largest request body accepted; a larger one gets HTTP 413 with a JSON-RPC error."""
    list_ttl_ms: int = Field(default=60_000, ge=0)
    """Freshness hint (`ttlMs`) on the results of `tools/list`, `prompts/list`, `resources/list`,
    `resources/templates/list`, `resources/read` and `server/discover`."""
    shutdown_timeout_seconds: float = Field(default=10.0, gt=0)
    """How long `serve` waits after SIGTERM for in-flight requests before closing their connections (listen
    streams are ended at once). Whole seconds count: a fraction is dropped."""
    log_level: str = "info"
    """Server log level: `critical`, `error`, `warning`, `info` or `debug`."""
    tasks: TaskSettings = Field(default_factory=TaskSettings)
    """The Tasks extension: retention, polling, concurrency and crash recovery (`AML_MCP_TASKS__*`)."""
    auth: AuthSettings = Field(default_factory=AuthSettings)
    """OAuth resource server, audit and the development authorization server (`AML_MCP_AUTH__*`)."""
    aml: AmlSettings = Field(default_factory=AmlSettings)
    """The AML tools and the demo corpus (`AML_MCP_AML__*`)."""
    http: HttpSettings = Field(default_factory=HttpSettings)
    """Limits of the HTTP edge: header count and size, body nesting, slow clients, connections
    (`AML_MCP_HTTP__*`)."""
    lab: LabSettings = Field(default_factory=LabSettings)
    """The `/lab` web page: tools, a live Tasks timeline, the authorization simulation and the audit
    view (`AML_MCP_LAB__*`)."""
    max_listen_streams_per_principal: int = Field(default=16, gt=0)
    """Open `subscriptions/listen` streams one caller (issuer and subject) may hold at once; one
    more is refused (-32602), so no caller can use up the server-wide stream limit."""
    listen: ListenSettings = Field(default_factory=ListenSettings)
    """`subscriptions/listen`: each caller's rate of (re)connects and of current state re-sent (with
    authentication on; off, there is one local caller and no rate), and how long a stream may stay
    behind a failed resync (`AML_MCP_LISTEN__*`)."""

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None and value.split("://", 1)[0] not in ("postgresql", "postgres"):
            raise ValueError("database_url must be a postgresql:// URL")
        return value or None

    @field_validator("database_schema")
    @classmethod
    def _schema_name(cls, value: str | None) -> str | None:
        if value is not None and not SCHEMA_NAME.match(value):
            raise ValueError("database_schema must be a lower-case SQL identifier (a-z, 0-9, _; 40 at most)")
        return value

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.lower()
        if level not in {"critical", "error", "warning", "info", "debug"}:
            raise ValueError("log_level must be one of critical, error, warning, info, debug")
        return level

    @model_validator(mode="after")
    def _api_role_shares_tasks(self) -> Settings:
        if self.role == "api" and self.database_url is None:
            raise ValueError(
                "role 'api' needs database_url: its tasks are run by workers sharing that database"
            )
        return self

    @model_validator(mode="after")
    def _metrics_beside_the_public_port(self) -> Settings:
        if self.metrics_port and self.metrics_port == self.port:
            raise ValueError("metrics_port must differ from port: /metrics has a listener of its own")
        return self

    @model_validator(mode="after")
    def _lab_signs_in(self) -> Settings:
        if self.lab.enabled and not self.auth.enabled:
            raise ValueError("lab.enabled needs auth.enabled: the page signs in like any client")
        return self

    @property
    def lab_served(self) -> bool:
        """Whether `/lab` exists: as configured, else exactly when the development issuer runs."""
        if self.lab.enabled is not None:
            return self.lab.enabled
        return self.auth.enabled and self.auth.dev.enabled

    @property
    def simulation_served(self) -> bool:
        """Whether the lab serves its authorization simulation: asked for, the lab served, and the
        development authorization server (which signs the simulation's tokens) running."""
        return self.lab.simulation and self.lab_served and self.auth.enabled and self.auth.dev.enabled

    @property
    def resource_url(self) -> str:
        """The canonical URI of the MCP endpoint: what tokens must name as their audience."""
        if self.public_url:
            return self.public_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"

    @property
    def binds_loopback(self) -> bool:
        return is_loopback_host(self.host)

    @property
    def exposed_at(self) -> str | None:
        """Where this server is reachable beyond this machine, as configured: the bind host when it
        is not loopback, else the public URL when its host is not loopback (a replica bound to
        loopback behind a proxy serves whoever reaches the proxy); None when both are loopback.

        A public URL whose host cannot be read counts as public: the guards built on this fail closed.
        """
        if not self.binds_loopback:
            return self.host
        if self.public_url:
            try:
                host = urlsplit(self.public_url).hostname
            except ValueError:
                host = None
            if not is_loopback_host(host):
                return self.public_url
        return None

    def ensure_data_dir(self) -> Path:
        """The data directory, created owner-only (0700) if missing.

        It holds every bank's notes, SAR drafts, analysts' answers and the audit trail, so other
        users of the machine must not even list it. An existing directory that group or others
        can enter is used as it is (it may be a mount point the operator manages) but warned
        about; the files inside are owner-only whatever the directory's mode.
        """
        path = self.data_dir
        try:
            path.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            if not path.is_dir():
                raise NotADirectoryError(f"data directory {path} exists and is not a directory") from None
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                logger.warning(
                    "data directory %s is open to other users (mode %04o): chmod 700 %s", path, mode, path
                )
        else:
            os.chmod(path, 0o700)  # whatever the umask left of the mode asked for
        return path


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from defaults, an optional TOML file, the environment and explicit overrides.

    Overrides are the command-line flags the user actually gave (pass only those), so they win
    over everything else.
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    if config_file is None:
        return Settings(**given)
    if not config_file.is_file():
        raise FileNotFoundError(f"config file not found: {config_file}")

    class _WithToml(Settings):
        model_config = SettingsConfigDict(toml_file=config_file)

        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    return _WithToml(**given)
