"""The MLflow tracking REST API under /mlflow/, so code that calls mlflow logs into Trainyard."""
