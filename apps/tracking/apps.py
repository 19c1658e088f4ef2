from django.apps import AppConfig


class TrackingConfig(AppConfig):
    name = "apps.tracking"
    label = "tracking"

    def ready(self) -> None:
        from apps.core.seeding import DEMO_HISTORY_SEEDERS, DEMO_SEEDERS
        from apps.runs.api.extras import RUN_LIST_EXTRAS
        from apps.tenants.views import HOME_PANELS, PROJECT_PANELS
        from apps.tracking import views
        from apps.tracking.api.run_metrics import add_metrics_summary
        from apps.tracking.seed import seed_history_metrics, seed_tracking

        if add_metrics_summary not in RUN_LIST_EXTRAS:
            RUN_LIST_EXTRAS.append(add_metrics_summary)
        if seed_tracking not in DEMO_SEEDERS:
            DEMO_SEEDERS.append(seed_tracking)
        if seed_history_metrics not in DEMO_HISTORY_SEEDERS:
            DEMO_HISTORY_SEEDERS.append(seed_history_metrics)  # after billing's runs (it inserts itself first)
        # What the project's runs are doing comes before its spend and secrets.
        if views.project_runs_panel not in PROJECT_PANELS:
            PROJECT_PANELS.insert(0, views.project_runs_panel)
        if views.home_runs_panel not in HOME_PANELS:
            HOME_PANELS.append(views.home_runs_panel)
