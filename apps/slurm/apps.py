from django.apps import AppConfig


class SlurmConfig(AppConfig):
    name = "apps.slurm"
    label = "slurm"
    verbose_name = "Slurm pools"
