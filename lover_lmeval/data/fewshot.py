"""Few-shot exemplars: worked solutions that end in the answer sentence each task's instruction asks for.

The task YAMLs render `--num_fewshot K` exemplars from a `fewshot` split that the loaders in tasks.py build with
these helpers: a doc's `question` (and `options`) go through the task's own `doc_to_text`, and its `solution`
is the exemplar's answer, e.g. "Natalia sold 48/2 = 24 clips in May. ... The answer is 72." An exemplar whose
answer were the bare target ("Answer: 72") would contradict the instruction "Let's think step by step, then
finish with 'The answer is'", and models copy exemplars rather than instructions.

Where each family's exemplars come from (never from the split a task is evaluated on):
- GSM8K: the first FEWSHOT_POOL questions of the training split, their reference solutions without the
  calculator annotations ("<<48/2=24>>") and the "#### 72" line.
- iGSM: the first FEWSHOT_POOL training problems (max_op 8, seed 43), the generator's own solution steps.
- BIG-Bench Hard: the BBH paper's 3-shot chain-of-thought prompts ($LOVER_DATA_DIR/bbh/cot-prompts/<task>.txt).
- MMLU-Pro: the validation split's `cot_content` for the test category (the benchmark's own few-shot set) where
  the data has it (the hub, or $LOVER_DATA_DIR/mmlu_pro/validation.jsonl); the offline test file has none, so
  otherwise MMLU_PRO_EXEMPLARS, written for this project in categories that are not test categories.
- HotpotQA yes/no: HOTPOTQA_EXEMPLARS, written for this project. The offline data has no labelled question
  outside the test split and no supporting facts (its training split is unlabeled).
- MATH-500: MINERVA_EXEMPLARS, the four worked MATH training solutions of Lewkowycz et al. that lm-eval's minerva_math
  uses, each closing "The answer is $\\boxed{X}$." (`math_solution`).
"""

from __future__ import annotations

import re

FEWSHOT_POOL = 8  # exemplars kept for the families that draw from a training split (GSM8K's usual 8-shot)
BBH_COT_DIR = "bbh/cot-prompts"  # relative to LOVER_DATA_DIR

_CALCULATOR = re.compile(r"<<[^<>]*>>")
_BBH_EXEMPLAR = re.compile(r"Q: (?P<question>.*?)\nA: Let's think step by step\.\n(?P<reasoning>.*?)"
                           r"So the answer is (?P<answer>[^\n]*?)\.\s*(?=\nQ: |$)", re.S)
_FINAL_CHOICE = re.compile(r"\s*The answer is \(?[A-J]\)?\.?\s*$")
_MINERVA_FINAL = re.compile(r"\nFinal Answer: The final answer is \$(?P<answer>.+)\$\. I hope it is correct\.\s*$",
                            re.S)


def gsm8k_solution(answer: str, target: str) -> str:
    """A GSM8K reference solution as an exemplar: calculator annotations and the "#### N" line dropped, the answer
    sentence appended ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\\n#### 24" -> "Natalia sold 48/2 = 24 clips
    in May.\\nThe answer is 24.")."""
    steps = _CALCULATOR.sub("", answer.split("####")[0]).strip()
    return f"{steps}\nThe answer is {target}."


def igsm_solution(solution: str, answer: str) -> str:
    """The generator's steps, its closing "Thus, the answer is N." in the instruction's words ("The answer is N.")."""
    steps = solution.strip().removesuffix(f"Thus, the answer is {answer}.").rstrip()
    return f"{steps} The answer is {answer}."


def bbh_exemplars(text: str) -> list[dict]:
    """The exemplars of one BBH cot-prompts file as {question, solution, answer}: the question as the task's docs
    hold it (no leading "Question: "), the reasoning after "Let's think step by step." (the instruction already
    says it), its closing "So the answer is X." in the instruction's words ("The answer is X.")."""
    body = text.split("\n-----\n", 1)[-1]
    exemplars = [{"question": m["question"].strip().removeprefix("Question: "),
                  "solution": f"{m['reasoning']}The answer is {m['answer']}.".strip(), "answer": m["answer"]}
                 for m in _BBH_EXEMPLAR.finditer(body)]
    if len(exemplars) != body.count("\nA: "):
        raise ValueError(f"a BBH cot-prompts file holds {body.count(chr(10) + 'A: ')} exemplars, but only "
                         f"{len(exemplars)} have the 'A: Let's think step by step. ... So the answer is X.' form")
    return exemplars


def mmlu_pro_solution(cot_content: str, letter: str) -> str:
    """MMLU-Pro's `cot_content` ("A: Let's think step by step. ... The answer is (B).") as an exemplar: without the
    "A:" and "Let's think step by step." the instruction already gives, ending in "The answer is (<letter>)."."""
    text = cot_content.strip().removeprefix("A:").strip().removeprefix("Let's think step by step.").strip()
    return f"{_FINAL_CHOICE.sub('', text)} The answer is ({letter}).".strip()


def math_solution(solution: str) -> tuple[str, str]:
    """A Minerva exemplar as (solution, answer): its closing line "Final Answer: The final answer is $X$. I hope it is
    correct." in the instruction's words, "The answer is $\\boxed{X}$.", and X as written."""
    final = _MINERVA_FINAL.search(solution)
    if final is None:
        raise ValueError("a Minerva exemplar must end 'Final Answer: The final answer is $X$. I hope it is correct.'")
    return f"{solution[:final.start()].rstrip()}\nThe answer is $\\boxed{{{final['answer']}}}$.", final["answer"]


# Closed-book yes/no questions in HotpotQA's two styles (comparison, bridge), answered from memory in a few facts;
# they alternate yes / no so that any K-shot prompt shows both answers.
HOTPOTQA_EXEMPLARS = (
    {"question": "Are both the Louvre and the Musée d'Orsay located in Paris?",
     "solution": "The Louvre is in Paris, on the Right Bank of the Seine. The Musée d'Orsay is in Paris too, on the "
                 "Left Bank. So both are in Paris. The answer is yes.", "answer": "yes"},
    {"question": "Were Albert Einstein and Niels Bohr born in the same country?",
     "solution": "Albert Einstein was born in Ulm, in Germany. Niels Bohr was born in Copenhagen, in Denmark. "
                 "Germany and Denmark are different countries. The answer is no.", "answer": "no"},
    {"question": "Did the director of Jaws also direct Jurassic Park?",
     "solution": "Jaws (1975) was directed by Steven Spielberg. Jurassic Park (1993) was directed by Steven "
                 "Spielberg as well. The answer is yes.", "answer": "yes"},
    {"question": "Did the Beatles and the Rolling Stones form in the same city?",
     "solution": "The Beatles formed in Liverpool in 1960. The Rolling Stones formed in London in 1962. Liverpool "
                 "and London are different cities. The answer is no.", "answer": "no"},
)

# Ten-option questions of three categories that are not MMLU-Pro test categories (math, chemistry, economics),
# with short worked solutions; used where the data has no validation `cot_content`.
MMLU_PRO_EXEMPLARS = (
    {"question": "What is the remainder when 2^10 is divided by 7?",
     "options": ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
     "solution": "2^3 = 8 = 7 + 1, so 2^3 leaves remainder 1 when divided by 7. Then 2^9 = (2^3)^3 leaves remainder "
                 "1^3 = 1, and 2^10 = 2^9 * 2 leaves remainder 1 * 2 = 2. Check: 2^10 = 1024 = 7 * 146 + 2. "
                 "The answer is (C).", "answer": "C"},
    {"question": "How many moles of water are produced when 4 moles of hydrogen gas react completely with excess "
                 "oxygen?",
     "options": ["1", "2", "3", "4", "5", "6", "8", "10", "12", "16"],
     "solution": "The balanced equation is 2 H2 + O2 -> 2 H2O, so each mole of H2 gives one mole of H2O. With "
                 "oxygen in excess, all 4 moles of H2 react and give 4 moles of H2O. The answer is (D).",
     "answer": "D"},
    {"question": "The price of a good rises from $10 to $12, and the quantity demanded falls from 100 to 90 units. "
                 "Taking the initial values as the base, what is the price elasticity of demand?",
     "options": ["-2.0", "-1.5", "-1.0", "-0.75", "-0.5", "-0.25", "0.5", "1.0", "2.0", "0"],
     "solution": "The quantity changes by (90 - 100) / 100 = -10%, and the price by (12 - 10) / 10 = +20%. The "
                 "elasticity is the ratio of the two: -10% / 20% = -0.5. The answer is (E).", "answer": "E"},
)


# The four worked MATH solutions of Lewkowycz et al. 2022 (Minerva) as lm-eval's minerva_math ships them
# (lm_eval/tasks/minerva_math/utils.py, list_fewshot_samples): MATH training problems, none of them in MATH-500; each
# ends in their line "Final Answer: The final answer is $X$. I hope it is correct." (math_solution rewrites it).
MINERVA_EXEMPLARS = (
    {"question": "Find the domain of the expression  $\\frac{\\sqrt{x-2}}{\\sqrt{5-x}}$.",
     "solution": "The expressions inside each square root must be non-negative. Therefore, $x-2 "
                 "\\ge 0$, so $x\\ge2$, and $5 - x \\ge 0$, so $x \\le 5$. Also, the denominator "
                 "cannot be equal to zero, so $5-x>0$, which gives $x<5$. Therefore, the domain "
                 "of the expression is $\\boxed{[2,5)}$.\nFinal Answer: The final answer is "
                 "$[2,5)$. I hope it is correct."},
    {"question": "If $\\det \\mathbf{A} = 2$ and $\\det \\mathbf{B} = 12,$ then find $\\det "
                 "(\\mathbf{A} \\mathbf{B}).$",
     "solution": "We have that $\\det (\\mathbf{A} \\mathbf{B}) = (\\det \\mathbf{A})(\\det "
                 "\\mathbf{B}) = (2)(12) = \\boxed{24}.$\nFinal Answer: The final answer is $24$. "
                 "I hope it is correct."},
    {"question": "Terrell usually lifts two 20-pound weights 12 times. If he uses two 15-pound "
                 "weights instead, how many times must Terrell lift them in order to lift the "
                 "same total weight?",
     "solution": "If Terrell lifts two 20-pound weights 12 times, he lifts a total of $2\\cdot "
                 "12\\cdot20=480$ pounds of weight.  If he lifts two 15-pound weights instead for "
                 "$n$ times, he will lift a total of $2\\cdot15\\cdot n=30n$ pounds of weight.  "
                 "Equating this to 480 pounds, we can solve for $n$:\n\\begin{align*}\n"
                 "30n&=480\\\\\n\\Rightarrow\\qquad n&=480/30=\\boxed{16}\n\\end{align*}\nFinal "
                 "Answer: The final answer is $16$. I hope it is correct."},
    {"question": "If the system of equations\n\n\\begin{align*}\n6x-4y&=a,\\\\\n6y-9x &=b.\n"
                 "\\end{align*}has a solution $(x, y)$ where $x$ and $y$ are both nonzero,\nfind "
                 "$\\frac{a}{b},$ assuming $b$ is nonzero.",
     "solution": "If we multiply the first equation by $-\\frac{3}{2}$, we obtain\n\n"
                 "$$6y-9x=-\\frac{3}{2}a.$$Since we also know that $6y-9x=b$, we have\n\n"
                 "$$-\\frac{3}{2}a=b\\Rightarrow\\frac{a}{b}=\\boxed{-\\frac{2}{3}}.$$\nFinal "
                 "Answer: The final answer is $-\\frac{2}{3}$. I hope it is correct."},
)
