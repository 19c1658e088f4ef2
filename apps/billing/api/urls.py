from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from apps.billing.api import views

router = SimpleRouter()
router.register("finance/budgets", views.FinanceBudgetViewSet, basename="finance-budget")
router.register("finance/quotas", views.FinanceQuotaViewSet, basename="finance-quota")

urlpatterns: list[URLPattern | URLResolver] = [
    path("projects/<int:project_id>/budget/", views.ProjectBudgetView.as_view(), name="project-budget"),
    path("finance/spend/", views.FinanceSpendView.as_view(), name="finance-spend"),
    path("finance/ledger.csv", views.FinanceLedgerCsvView.as_view(), name="finance-api-ledger-csv"),
    *router.urls,
]
